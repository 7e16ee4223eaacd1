import pytest
import torch
import torch.nn.functional as F

from polyalign.model.losses import cross_entropy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_cross_entropy_equals_the_reference(dtype):
    torch.manual_seed(0)
    logits = (3 * torch.randn(37, 50)).to(dtype).requires_grad_()
    target = torch.randint(0, 50, (37,))
    ours = cross_entropy(logits, target, chunk=8)
    ours.backward()
    g_ours = logits.grad.clone()
    logits.grad = None
    ref = F.cross_entropy(logits.float(), target)
    ref.backward()
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g_ours.float(), logits.grad.float(), atol=tol, rtol=tol)


def test_empty_input_gives_zero_loss_with_a_graph():
    logits = torch.zeros(0, 5, requires_grad=True)
    loss = cross_entropy(logits, torch.zeros(0, dtype=torch.long))
    loss.backward()
    assert loss.item() == 0.0


def test_ignored_rows_are_excluded_from_loss_and_gradient():
    torch.manual_seed(1)
    logits = torch.randn(10, 7, requires_grad=True)
    target = torch.randint(0, 7, (10,))
    target[[2, 5, 9]] = -100
    loss = cross_entropy(logits, target, chunk=4)
    loss.backward()
    ref = F.cross_entropy(logits.detach(), target)
    torch.testing.assert_close(loss, ref)
    assert logits.grad[[2, 5, 9]].abs().sum() == 0


def test_pad_rows_rounds_up_to_the_multiple():
    from polyalign.model.losses import pad_rows

    assert pad_rows(torch.ones(65, 3)).shape == (128, 3)
    assert pad_rows(torch.ones(64, 3)).shape == (64, 3)
    assert pad_rows(torch.arange(3), 4, value=-100).tolist() == [0, 1, 2, -100]
