"""The encoder's CPU fast paths compute what the reference ops compute."""

import pytest
import torch
import torch.nn.functional as F

from polyalign.model.encoder import EXPLICIT_ATTENTION_MAX, Dropout, attend, expand_attention_mask


@pytest.mark.parametrize("kind", ["padding", "full", "additive"])
def test_explicit_attention_equals_sdpa(kind):
    torch.manual_seed(0)
    B, H, T, hs = 3, 4, 9, 8
    q, k, v = (torch.randn(B, H, T, hs, requires_grad=True) for _ in range(3))
    lengths = torch.tensor([9, 6, 2])
    padding = torch.arange(T)[None] < lengths[:, None]  # (B, T)
    if kind == "padding":
        mask = expand_attention_mask(padding, B, T, T, "cpu")
    else:
        mask = expand_attention_mask(torch.rand(B, T, T) < 0.6, B, T, T, "cpu")
        if kind == "additive":  # how a position bias arrives: bias where allowed, -inf elsewhere
            mask = torch.where(mask, torch.randn(B, H, T, T), float("-inf"))
    ours = attend(q, k, v, mask, Dropout(0.0))
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, reference, atol=1e-6, rtol=1e-5)
    g = torch.randn_like(ours)
    grads = torch.autograd.grad(ours, (q, k, v), g)
    reference_grads = torch.autograd.grad(reference, (q, k, v), g)
    for a, b in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert T * T <= EXPLICIT_ATTENTION_MAX  # the explicit path was the one tested


def test_dropout_keeps_the_expectation_and_rate_and_follows_the_torch_seed():
    x = torch.ones(200_000)
    drop = Dropout(0.1).train()
    torch.manual_seed(0)
    y = drop(x)
    assert abs(float((y == 0).float().mean()) - 0.1) < 0.003  # 4 sigma for 200k Bernoulli(0.1) draws
    assert abs(float(y.mean()) - 1.0) < 0.01
    assert torch.unique(y).tolist() == [0.0, pytest.approx(1 / 0.9)]
    torch.manual_seed(0)
    assert torch.equal(drop(x), y)  # reproducible from torch's generator, as checkpoint/resume needs
    assert not torch.equal(drop(x), y)
    assert drop.eval()(x) is x
    bf16 = Dropout(0.5).train()(torch.ones(1000, dtype=torch.bfloat16, requires_grad=True))
    assert bf16.dtype == torch.bfloat16
    bf16.sum().backward()  # gradients flow through the kept elements only
