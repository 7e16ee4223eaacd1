"""The relative and gated relative (XLM-E §3.3, Eq. 7) biases through FlexAttention (model/biased_attention.py):
the same attention, values and gradients, as the materialised (B, H, T, T) bias that SDPA adds.

On a CPU FlexAttention runs its reference math; torch refuses its backward there only because its compiled CPU
kernel has none, so these tests lift that gate: the reference math differentiates the score_mod, the tensors it
reads included, by the same joint graph the CUDA kernels are generated from (tests/test_gpu.py runs those)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.attention.flex_attention as flex_module
import torch.nn.functional as F

from polyalign.model.encoder import Encoder
from polyalign.model.position_bias import GatedRelativePositionBias, RelativePositionBias, relative_position_bucket
from tests.conftest import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")

B, H, T, hs = 2, 4, 24, 8


@pytest.fixture(autouse=True)
def flex_backward_on_cpu(monkeypatch):
    monkeypatch.setattr(flex_module, "_validate_device", lambda *tensors: None)


def random_bias(gated: bool, max_distance: int = 10) -> torch.nn.Module:
    """Random table, gates and w (every gate differs), a max_distance below T so that far keys share buckets."""
    torch.manual_seed(0)
    bias = GatedRelativePositionBias(H, hs, 16, max_distance) if gated else RelativePositionBias(H, 16, max_distance)
    with torch.no_grad():
        for p in bias.parameters():
            p.normal_()
    return bias


def restarting_positions() -> torch.Tensor:
    """Row 0 counts 0..T-1; row 1 restarts at 0 halfway (a pair, as TLM lays it out, or two packed sentences)."""
    return torch.stack([torch.arange(T), torch.arange(T) % (T // 2)])  # (B, T)


def block_diagonal() -> torch.Tensor:
    """Two sentences that cannot see each other, the second ending in padding (B, 1, T, T); a padding query sees
    itself, as expand_attention_mask has it."""
    first = torch.arange(T) < T // 2
    allowed = (first[:, None] == first[None, :]) & (torch.arange(T) < T - 3)
    return (allowed | torch.eye(T, dtype=torch.bool)).expand(B, 1, T, T)


MASKS = {
    "none": lambda: None,
    "key padding": lambda: (torch.arange(T) < torch.tensor([[T], [T - 7]]))[:, None, None, :],  # (B, 1, 1, T)
    "block diagonal": block_diagonal,
}


def materialised(bias, q, k, v, mask, positions):
    """The reference: SDPA with the bias where allowed and -inf elsewhere (Attention.forward's materialised path)."""
    full = bias(q, positions)  # (B, H, T, T)
    additive = full if mask is None else full.masked_fill(~mask, -torch.inf)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=additive)


def assert_gradients_close(grads: dict, reference: dict, atol: float) -> None:
    assert set(grads) == set(reference)
    for name, grad in grads.items():
        assert grad.abs().sum() > 0, name  # each gradient is exercised
        torch.testing.assert_close(grad, reference[name], rtol=1e-4, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


def values_and_gradients(attention, bias, mask):
    torch.manual_seed(1)
    q, k, v = (torch.randn(B, H, T, hs, requires_grad=True) for _ in range(3))
    bias.zero_grad()
    out = attention(bias, q, k, v, mask, restarting_positions())
    (out * torch.randn_like(out)).sum().backward()  # a random cotangent: every output feeds the gradients
    named = {"q": q, "k": k, "v": v} | dict(bias.named_parameters())
    return out.detach(), {name: t.grad.clone() for name, t in named.items()}


@pytest.mark.parametrize("gated", [False, True], ids=["relative", "gated relative"])
@pytest.mark.parametrize("mask_name", list(MASKS))
def test_flex_attention_equals_the_materialised_bias_in_values_and_gradients(gated, mask_name):
    bias, mask = random_bias(gated), MASKS[mask_name]()
    reference, reference_grads = values_and_gradients(materialised, bias, mask)
    out, grads = values_and_gradients(lambda b, *args: b.attend(*args), bias, mask)
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)
    assert ("gates.weight" in grads) == gated
    assert_gradients_close(grads, reference_grads, atol=1e-5)


def test_a_block_mask_of_packed_sentences_attends_as_the_same_boolean_mask():
    """Packed rows hand FlexAttention a BlockMask (whole blocks skipped) instead of a boolean mask."""
    from torch.nn.attention.flex_attention import create_block_mask

    dense = block_diagonal()
    block_mask = create_block_mask(lambda b, h, i, j: dense[b, 0, i, j], B, None, T, T, device="cpu")
    bias = random_bias(gated=True)
    reference, reference_grads = values_and_gradients(materialised, bias, dense)
    out, grads = values_and_gradients(
        lambda b, q, k, v, _, positions: b.attend(q, k, v, block_mask, positions), bias, dense
    )
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)
    assert_gradients_close(grads, reference_grads, atol=1e-5)


def test_the_bucket_lookup_buckets_every_distance_as_the_t5_function():
    bias = RelativePositionBias(H, num_buckets=32, max_distance=128)
    distances = torch.arange(-600, 601)
    lookup = bias.buckets[distances.clamp(-128, 128) + 128]
    assert torch.equal(lookup, relative_position_bucket(distances, 32, 128))
    assert lookup.unique().numel() == 31  # every bucket but 16 (a positive 0), the last of each side from 128 on


@pytest.mark.parametrize("position_bias", ["relative", "gated_relative"])
def test_an_encoder_trains_alike_on_either_kernel(position_bias):
    """The layer's dispatch: the same outputs and parameter gradients with the FlexAttention kernel as with the
    materialised bias, under a (B, T) padding mask."""
    assert_kernels_train_alike(position_bias, torch.device("cpu"), length=T, atol=5e-5)


def assert_kernels_train_alike(position_bias: str, device, length: int, atol: float) -> None:
    """An encoder's outputs and parameter gradients with the FlexAttention kernel and with the materialised bias;
    `atol` for gradients summed over two layers in another order (and, on CUDA, by other kernels)."""
    torch.manual_seed(0)
    # hs 16: the least head size the Triton kernels take (tl.dot tiles)
    config = tiny_config(hidden_size=64, num_heads=4, position_bias=position_bias, absolute_positions=False)
    encoder = Encoder(config).to(device)
    ids = torch.randint(5, 99, (B, length), device=device)
    padding = torch.arange(length, device=device) < torch.tensor([[length], [length - 5]], device=device)
    runs = []
    for kernel in ("materialised", "flex"):
        for layer in encoder.layers:
            bias = layer.attention.position_bias
            getattr(bias, "relative", bias).kernel = kernel
        encoder.zero_grad()
        out = encoder(ids, attention_mask=padding).last_hidden_state[padding]
        out.pow(2).sum().backward()
        runs.append((out.detach(), {n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None}))
    (reference, reference_grads), (flex, flex_grads) = runs
    torch.testing.assert_close(flex, reference, rtol=1e-5, atol=atol / 5)
    assert_gradients_close(flex_grads, reference_grads, atol=atol)


def test_auto_takes_the_materialised_bias_and_flex_attention_only_when_asked_without_attention_dropout():
    bias = RelativePositionBias(H)
    off, on = torch.nn.Dropout(0.0), torch.nn.Dropout(0.1).train()
    assert not bias.fused(off)  # auto, on any device: FlexAttention did not compile on an H200
    bias.kernel = "flex"
    assert bias.fused(off)
    assert not bias.fused(on)  # FlexAttention has no attention dropout
    assert bias.fused(torch.nn.Dropout(0.1).eval())  # dropout off outside training
    bias.kernel = "materialised"
    assert not bias.fused(off)


@pytest.mark.parametrize("gated", [False, True], ids=["relative", "gated relative"])
def test_flex_attention_reads_the_columns_as_the_materialised_bias_does(gated):
    """position_ids None (positions that follow the columns): the score_mod's distance j - i against the shared
    (H, T, T) gather, values and gradients, under a key-padding mask."""
    bias, mask = random_bias(gated), MASKS["key padding"]()
    reference, reference_grads = values_and_gradients(
        lambda b, q, k, v, m, _: materialised(b, q, k, v, m, None), bias, mask
    )
    out, grads = values_and_gradients(lambda b, q, k, v, m, _: b.attend(q, k, v, m, None), bias, mask)
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)
    assert_gradients_close(grads, reference_grads, atol=1e-5)
