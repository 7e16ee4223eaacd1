"""Unpadded encoding (model/unpadded.py): the real tokens as one (N, C) matrix through every dense layer, attention
per example. On a CPU its attention is the padded path's own, so the two paths must give every objective that reads
packed rows the same loss and the same gradients, in fp64, on padded rows and on packed rows; the CUDA kernel's
place is checked with a reference variable-length attention standing in for it."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
import torch
import torch.nn.attention.varlen as varlen_module
import torch.nn.functional as F

import polyalign.model.unpadded as unpadded_module
from polyalign.config import load_recipe, unpads_rows
from polyalign.data.loader import consecutive_positions, sides
from polyalign.data.packing import RowFiller, unpadding_indices
from polyalign.data.streams import MonoBatch, ParallelBatch
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.model.unpadded import pad, unpad, unpadded_positions, varlen_fits
from polyalign.objectives.contrast import ContrastConfig, SentenceContrast
from polyalign.objectives.mlm import MLM, MLMConfig
from polyalign.objectives.rtd import MRTD, TRTD, RTDConfig, TRTDConfig
from polyalign.objectives.tlm import TLM, TLMConfig
from tests.conftest import special_tokens, tiny_config

SP = special_tokens()
LENGTHS = [12, 5, 20, 3, 9, 14, 1]
FIRST, SECOND = [4, 9, 2, 11, 7], [6, 3, 8, 5, 2]


def sentences(lengths: list[int], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(SP.first_normal, SP.vocab_size, size=n) for n in lengths]


def first_fit(lengths: list[int], rows: int = 3, length: int = 32):
    filler = RowFiller(rows, length)
    assert all(filler.place(n) for n in lengths)
    return filler.packing


def mono(packed: bool) -> MonoBatch:
    raw = MonoBatch(sentences(LENGTHS, 0), np.arange(len(LENGTHS)) % 3)
    return dataclasses.replace(raw, packing=first_fit([n + 2 for n in LENGTHS])) if packed else raw


def parallel(packed: bool) -> ParallelBatch:
    raw = ParallelBatch(sentences(FIRST, 1), sentences(SECOND, 2), np.zeros(5, np.int64), np.ones(5, np.int64))
    n = [x + y + 4 for x, y in zip(FIRST, SECOND, strict=True)]
    return dataclasses.replace(raw, packing=first_fit(n)) if packed else raw


OBJECTIVES = {  # name: (objective class, its config, the raw batch for packed or not)
    "mlm": (MLM, MLMConfig(), mono),
    "tlm": (TLM, TLMConfig(), parallel),
    "mrtd": (MRTD, RTDConfig(), mono),
    "trtd": (TRTD, TRTDConfig(), parallel),
    "contrast": (SentenceContrast, ContrastConfig(), parallel),
}


def loader_batch(objective, raw, unpad_rows: bool) -> dict:
    """The batch as the loader hands it over (its flags; with `unpad_rows`, the unpadding indices of every side)."""
    batch = objective.make_training_batch(raw, np.random.default_rng(0))
    for prefix in sides(batch):
        if consecutive_positions(batch, prefix):
            batch[prefix + "consecutive_positions"] = True
        if unpad_rows:
            batch |= unpadding_indices(batch, prefix)
    return batch


def loss_and_gradients(name: str, packed: bool, unpad_rows: bool):
    cls, config, raw_of = OBJECTIVES[name]
    model_config = tiny_config(num_languages=3)
    objective = cls(config, SP, model_config)
    torch.manual_seed(0)
    model = MaskedLanguageModel(model_config)
    objective.setup(model)
    model.double(), objective.double()
    batch = loader_batch(objective, raw_of(packed), unpad_rows)
    assert ("token_index" in batch) == unpad_rows
    torch.manual_seed(1)  # the generator's draws (RTD)
    loss = objective(model, batch).loss
    loss.backward()
    named = dict(model.named_parameters()) | {f"objective.{n}": p for n, p in objective.named_parameters()}
    return loss.detach(), {n: p.grad.clone() for n, p in named.items() if p.grad is not None}


@pytest.mark.parametrize("packed", [False, True], ids=["padded rows", "packed rows"])
@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_the_unpadded_path_has_the_padded_paths_loss_and_gradients(name, packed):
    reference, reference_grads = loss_and_gradients(name, packed, unpad_rows=False)
    loss, grads = loss_and_gradients(name, packed, unpad_rows=True)
    # fp64 throughout, but the losses' softmax runs in fp32 inside: one fp32 rounding of near-equal logits apart
    torch.testing.assert_close(loss, reference, rtol=1e-7, atol=1e-9)
    assert grads.keys() == reference_grads.keys()
    assert any(g.abs().sum() > 0 for g in grads.values())
    for n, grad in grads.items():
        torch.testing.assert_close(grad, reference_grads[n], rtol=1e-6, atol=1e-9, msg=lambda m, n=n: f"{n}: {m}")


def test_the_indices_name_each_real_token_and_each_example_in_row_major_order():
    batch = MLM(MLMConfig(), SP, tiny_config()).make_training_batch(mono(packed=True), np.random.default_rng(0))
    found = unpadding_indices(batch)
    example_ids = batch["example_ids"].flatten()
    token_index, cu = found["token_index"], found["cu_seqlens"]
    assert torch.equal(token_index, (example_ids >= 0).nonzero().squeeze(1))
    assert cu.dtype == torch.int32 and cu[0] == 0 and cu[-1] == len(token_index)
    lengths = (cu[1:] - cu[:-1]).tolist()
    assert sorted(lengths) == sorted(n + 2 for n in LENGTHS) and found["max_seqlen"] == max(LENGTHS) + 2
    for s in range(len(lengths)):  # each span is one example, whole
        ids = example_ids[token_index[cu[s] : cu[s + 1]]]
        assert (ids == ids[0]).all() and int((example_ids == ids[0]).sum()) == lengths[s]
    x = torch.randn(*batch["input_ids"].shape, 3)
    rows = pad(unpad(x, token_index), token_index, *batch["input_ids"].shape)
    real = batch["example_ids"] >= 0
    assert torch.equal(rows[real], x[real]) and not rows[~real].any()
    positions = torch.tensor([int(token_index[7]), int(token_index[0]), 0])
    assert unpadded_positions(positions, token_index, example_ids.numel()).tolist() == [7, 0, 0]


def reference_varlen(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k):
    """What torch's variable-length flash attention computes, one example at a time: (N, H, hs)."""
    assert torch.equal(cu_seq_q, cu_seq_k) and max_q == max_k == int((cu_seq_q[1:] - cu_seq_q[:-1]).max())
    out = torch.empty_like(q)
    for s, e in zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist(), strict=True):
        out[s:e] = F.scaled_dot_product_attention(*(t[s:e].transpose(0, 1) for t in (q, k, v))).transpose(0, 1)
    return out


@pytest.mark.parametrize("packed", [False, True], ids=["padded rows", "packed rows"])
def test_the_variable_length_kernels_place_gives_the_padded_paths_values_and_gradients(monkeypatch, packed):
    """The encoder as it runs on CUDA (varlen, no mask built), with a reference standing in for the kernel."""
    monkeypatch.setattr(unpadded_module, "VARLEN_DTYPES", (torch.float64,))
    monkeypatch.setattr(varlen_module, "varlen_attn", reference_varlen)
    import polyalign.model.encoder as encoder_module

    monkeypatch.setattr(encoder_module, "varlen_fits", lambda *args: True)
    test_the_unpadded_path_has_the_padded_paths_loss_and_gradients("mlm", packed)


def test_the_kernel_is_called_as_the_pinned_torch_declares_it():
    parameters = list(inspect.signature(varlen_module.varlen_attn).parameters)
    assert parameters[:7] == ["query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q", "max_k"]


def test_varlen_only_on_cuda_without_a_bias_or_attention_dropout():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert varlen_fits(tiny_config(), training=True, device=cuda)
    assert not varlen_fits(tiny_config(), training=True, device=cpu)
    gated = tiny_config(position_bias="gated_relative", absolute_positions=False)
    assert not varlen_fits(gated, training=True, device=cuda)
    assert not varlen_fits(tiny_config(attention_dropout=0.1), training=True, device=cuda)
    assert varlen_fits(tiny_config(attention_dropout=0.1), training=False, device=cuda)


def test_data_unpad_auto_is_on_for_packed_rows_on_cuda_without_a_bias_and_true_refuses_unpacked_readers():
    mlm = load_recipe("mlm", ["data.unpad=auto"])
    assert unpads_rows(mlm, "cuda", "none") and not unpads_rows(mlm, "cpu", "none")
    assert not unpads_rows(mlm, "cuda", "gated_relative")
    assert not unpads_rows(load_recipe("mlm"), "cuda", "none")  # the default: padded rows as before
    assert unpads_rows(load_recipe("mlm", ["data.unpad=true"]), "cpu", "gated_relative")
    with pytest.raises(DataError, match="data.unpad"):
        load_recipe("ppa", ["data.unpad=true"])
    with pytest.raises(DataError, match="unpad"):
        load_recipe("mlm", ["data.unpad=sometimes"])


@pytest.mark.integration
def test_pretraining_with_data_unpad_trains_as_the_padded_rows(sample_prepared, tmp_path):
    """`--set data.unpad=true` on a tiny MLM + TLM run in packed rows: the loader adds the indices, the trainer's
    step reads them, and the losses are those of the same run without it (no dropout, fp32)."""
    from polyalign.train import build_run, pretrain, start_loader
    from tests.conftest import exact_recipe_overrides, losses

    curves = []
    for setting in ("false", "true"):
        recipe = load_recipe(
            "xlm", [*exact_recipe_overrides(sample_prepared, 3), "data.pack=true", f"data.unpad={setting}"]
        )
        if setting == "true":
            run, _ = build_run(recipe, tmp_path / "probe")
            loader = start_loader(run)
            item = next(loader)
            loader.close()
            assert all("token_index" in batch for batch in item.slots[0].values())
        pretrain(recipe, tmp_path / setting, progress=False)
        curves.append(losses(tmp_path / setting))
    assert [s for s, _ in curves[1]] == [1, 2, 3]
    np.testing.assert_allclose([x for _, x in curves[1]], [x for _, x in curves[0]], rtol=1e-5)
