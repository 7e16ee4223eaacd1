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
