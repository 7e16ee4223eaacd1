import pytest
import torch
import torch.nn.functional as F

from polyalign.model.losses import _LinearCrossEntropy, cross_entropy, linear_cross_entropy


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


def linear_ce_inputs(dtype=torch.float64, device="cpu"):
    """x (70, 16), a padded output layer W (128, 16), b (128,), for 99 classes; targets with ignored rows."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(70, 16, generator=g, dtype=dtype).to(device).requires_grad_()
    weight = torch.randn(128, 16, generator=g, dtype=dtype).to(device).requires_grad_()
    bias = torch.randn(128, generator=g, dtype=dtype).to(device).requires_grad_()
    target = torch.randint(0, 99, (70,), generator=g).to(device)
    target[::7] = -100
    target[1] = 98  # the last class
    return x, weight, bias, target


def loss_and_grads(loss_fn, inputs):
    x, weight, bias, target = inputs
    for t in (x, weight, bias):
        t.grad = None
    loss = loss_fn(x, weight, bias, target)
    (2.5 * loss).backward()  # an upstream gradient other than 1 reaches every input
    return loss.detach(), x.grad.clone(), weight.grad.clone(), bias.grad.clone()


def plain_linear_cross_entropy(x, weight, bias, target):
    return F.cross_entropy(F.linear(x, weight, bias)[:, :99], target)  # autocast: the softmax in fp32


@pytest.mark.parametrize("chunk", [16, 1000])
def test_linear_cross_entropy_has_the_loss_and_gradients_of_the_plain_path(chunk):
    inputs = linear_ce_inputs()
    ours = loss_and_grads(lambda x, w, b, t: _LinearCrossEntropy.apply(x, w, b, t, 99, chunk), inputs)
    reference = loss_and_grads(plain_linear_cross_entropy, inputs)
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert not ours[2][99:].any() and not ours[3][99:].any()  # columns past `classes`: no gradient


def test_linear_cross_entropy_under_autocast_is_the_plain_path_within_bf16_rounding():
    inputs = linear_ce_inputs(torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = loss_and_grads(lambda x, w, b, t: linear_cross_entropy(x, w, b, t, 99), inputs)
        reference = loss_and_grads(plain_linear_cross_entropy, inputs)
    assert [t.dtype for t in ours[1:]] == [torch.float32] * 3  # gradients in the parameters' dtype
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-3)


def test_linear_cross_entropy_of_no_rows_is_zero_with_a_graph():
    x, weight, bias, target = linear_ce_inputs()
    loss = linear_cross_entropy(x[:0], weight, bias, target[:0], 99)
    loss.backward()
    assert loss.item() == 0.0 and not weight.grad.any()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_linear_cross_entropy_on_cuda_is_the_plain_path_within_bf16_rounding():
    """liger-kernel's fused kernel when installed (the `cuda` extra), else the chunked path, under autocast."""
    inputs = linear_ce_inputs(torch.float32, "cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ours = loss_and_grads(lambda x, w, b, t: linear_cross_entropy(x, w, b, t, 99), inputs)
        reference = loss_and_grads(plain_linear_cross_entropy, inputs)
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-3)
    assert not ours[2][99:].any() and not ours[3][99:].any()
