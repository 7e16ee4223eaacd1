"""The relative and gated relative (XLM-E §3.3, Eq. 7) biases gathered once per layer from column differences
(position_ids None) against the gather at every row's own positions, in fp64: the bias wherever a query may see a
key, and the attention's values and its six gradients (q, k, v, the bucket table, the gates' projection, w) on
padded rows and on packed rows whose examples each count their positions from 0; and the loader's check that
decides which of the two a batch may take."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from polyalign.data.layout import pair_layout, sentence_layout
from polyalign.data.loader import consecutive_positions
from polyalign.data.packing import RowFiller, pack_batch
from polyalign.model import MaskedLanguageModel
from polyalign.model.encoder import expand_attention_mask
from polyalign.model.packed_attention import packed_attention_mask
from polyalign.model.position_bias import GatedRelativePositionBias, RelativePositionBias
from polyalign.objectives.base import model_inputs
from tests.conftest import special_tokens, tiny_config

SP = special_tokens()
H, hs, T = 4, 8, 40


def random_bias(gated: bool) -> torch.nn.Module:
    """fp64, random table, gates and w; max_distance 12 < T so that far pairs share the last buckets."""
    torch.manual_seed(0)
    bias = GatedRelativePositionBias(H, hs, 16, 12) if gated else RelativePositionBias(H, 16, 12)
    bias = bias.double()
    with torch.no_grad():
        for p in bias.parameters():
            p.normal_()
    return bias


def padded_rows():
    """Two rows of one sentence each, the second ending in padding (position 0 there, as layouts fill it)."""
    lengths = torch.tensor([T, T - 11])
    real = torch.arange(T) < lengths[:, None]  # (B, T)
    positions = torch.where(real, torch.arange(T), 0)
    return positions, expand_attention_mask(real, 2, T, T, "cpu"), real


def packed_rows():
    """Two packed rows: examples of 9, 14, 6 / 17, 12 tokens, each counting positions from 0, then padding."""
    example_ids = torch.full((2, T), -1)
    positions = torch.zeros(2, T, dtype=torch.long)
    example = 0
    for row, lengths in enumerate(([9, 14, 6], [17, 12])):
        start = 0
        for n in lengths:
            example_ids[row, start : start + n] = example
            positions[row, start : start + n] = torch.arange(n)
            start, example = start + n, example + 1
    return positions, packed_attention_mask(example_ids, flex=False), example_ids >= 0


ROWS = {"padded rows": padded_rows, "packed rows": packed_rows}


@pytest.mark.parametrize("gated", [False, True], ids=["relative", "gated relative"])
@pytest.mark.parametrize("rows", list(ROWS))
def test_the_shared_gather_equals_each_rows_own_wherever_a_query_may_see(gated, rows):
    positions, mask, real = ROWS[rows]()
    bias = random_bias(gated)
    q = torch.randn(2, H, T, hs, dtype=torch.float64)
    with torch.no_grad():
        own, shared = bias(q, positions), bias(q, None)  # (B, H, T, T), (B or 1, H, T, T)
    # Real queries only: a padding query's output is never read (padding keys are masked for real queries).
    allowed = (mask & real[:, None, :, None]).expand(2, H, T, T)
    assert torch.equal(shared.expand(2, H, T, T)[allowed], own[allowed])
    assert not torch.equal(shared.expand(2, H, T, T), own)  # the pairs of two examples (or padding) do differ


def attention_values_and_gradients(bias, positions, mask, real):
    """SDPA with the bias where allowed and -inf elsewhere (the encoder's materialised path), in fp64; a random
    cotangent at real queries only (a loss reads no padding)."""
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, H, T, hs, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias.zero_grad()
    additive = torch.where(mask, bias(q, positions), float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=additive)  # (B, H, T, hs)
    cotangent = torch.randn_like(out) * real[:, None, :, None]
    (out * cotangent).sum().backward()
    named = {"q": q, "k": k, "v": v} | dict(bias.named_parameters())
    return out.detach() * real[:, None, :, None], {name: t.grad.clone() for name, t in named.items()}


@pytest.mark.parametrize("rows", list(ROWS))
def test_attention_with_the_shared_gather_has_the_same_values_and_six_gradients(rows):
    positions, mask, real = ROWS[rows]()
    bias = random_bias(gated=True)
    reference, reference_grads = attention_values_and_gradients(bias, positions, mask, real)
    out, grads = attention_values_and_gradients(bias, None, mask, real)
    torch.testing.assert_close(out, reference, rtol=1e-12, atol=1e-12)
    assert set(grads) == {"q", "k", "v", "relative.table.weight", "gates.weight", "w"}
    for name, grad in grads.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(
            grad, reference_grads[name], rtol=1e-10, atol=1e-12, msg=lambda m, n=name: f"{n}: {m}"
        )


def test_an_encoder_given_consecutive_positions_trains_as_with_each_rows_positions():
    """The encoder's dispatch: packed sentences through an XLM-E encoder, fp64, with and without the flag."""
    torch.manual_seed(0)
    config = tiny_config(
        position_bias="gated_relative", absolute_positions=False, relative_buckets=8, relative_max_distance=16
    )
    model = MaskedLanguageModel(config).double()
    rng = np.random.default_rng(0)
    lengths = [12, 5, 20, 3, 9, 14]
    unpacked = sentence_layout([rng.integers(5, 99, n) for n in lengths], None, SP).tensors()
    filler = RowFiller(3, 32)
    assert all(filler.place(n + 2) for n in lengths)
    packed = pack_batch(unpacked, filler.packing, SP.pad)
    assert consecutive_positions(packed)
    real = packed["example_ids"] >= 0
    runs = []
    for flag in (False, True):
        model.zero_grad()
        hidden = model(**model_inputs(packed), consecutive_positions=flag).last_hidden_state[real]
        (hidden * torch.linspace(-1, 1, hidden.numel(), dtype=torch.float64).view_as(hidden)).sum().backward()
        runs.append((hidden.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (reference, reference_grads), (hidden, grads) = runs
    torch.testing.assert_close(hidden, reference, rtol=1e-12, atol=1e-12)
    assert grads.keys() == reference_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(
            grad, reference_grads[name], rtol=1e-10, atol=1e-12, msg=lambda m, n=name: f"{n}: {m}"
        )


def pairs(style: str) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(1)
    first, second = [rng.integers(5, 99, n) for n in (4, 9, 2)], [rng.integers(5, 99, n) for n in (6, 3, 8)]
    return pair_layout(first, second, None, None, SP, style).tensors()


def test_the_loader_finds_consecutive_positions_only_where_every_example_has_them():
    rng = np.random.default_rng(0)
    sentences = sentence_layout([rng.integers(5, 99, n) for n in (7, 3, 12)], None, SP).tensors()
    assert consecutive_positions(sentences)  # one sentence per row, padding after it
    assert consecutive_positions(pairs("ppa"))  # positions run on across the pair
    assert not consecutive_positions(pairs("xlm"))  # positions restart at the second sentence
    filler = RowFiller(1, 64)
    assert all(filler.place(n) for n in (14, 15, 14))
    packed_xlm = pack_batch(pairs("xlm"), filler.packing, SP.pad)
    assert not consecutive_positions(packed_xlm)  # the restart is inside an example
    # contrast's packed rows: each side of a pair its own example, so each counts from 0 alone
    packed_xlm["example_ids"] = torch.where(
        packed_xlm["example_ids"] >= 0, 2 * packed_xlm["example_ids"] + packed_xlm["segment"], -1
    )
    assert consecutive_positions(packed_xlm)
    assert not consecutive_positions({"input_ids": sentences["input_ids"]})  # no positions: nothing to say


def test_without_the_flag_the_encoder_reads_each_rows_positions():
    """On TLM's `xlm` pairs positions restart inside an example: there the columns would give other biases, so the
    encoder takes them only when the loader says so."""
    torch.manual_seed(0)
    config = tiny_config(position_bias="gated_relative", absolute_positions=False, relative_buckets=8)
    model = MaskedLanguageModel(config).double().eval()
    batch = pairs("xlm")
    real = batch["attention_mask"]
    with torch.no_grad():
        own = model(**model_inputs(batch)).last_hidden_state[real]
        columns = model(**model_inputs(batch), consecutive_positions=True).last_hidden_state[real]
    assert not torch.allclose(own, columns)
