"""Packed rows: several examples side by side in a row are encoded exactly as each alone, the token-level losses
are those of the unpacked batch, streams fill rows under a real-token budget, and the recipe switch resolves."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
import yaml

import polyalign.model.packed_attention as packed_attention
from polyalign.config import load_recipe, packs_rows
from polyalign.data.layout import pair_layout, sentence_layout
from polyalign.data.packing import Packing, RowFiller, pack_batch, row_length
from polyalign.data.shards import ShardWriter, TokenShard
from polyalign.data.streams import MonoBatch, MonoStream, ParallelBatch, ParallelStream, StreamConfig
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.model.encoder import Dropout, attend
from polyalign.model.pooling import pool, pool_examples
from polyalign.objectives.base import model_inputs
from polyalign.objectives.contrast import ContrastConfig, SentenceContrast
from polyalign.objectives.mlm import MLM, MLMConfig, masked_lm_output
from polyalign.objectives.tlm import TLM, TLMConfig
from polyalign.train import build_run, load_run_recipe, pretrain, start_loader
from tests.conftest import losses, special_tokens, tiny_config, tiny_recipe_overrides

SP = special_tokens()


def sentences(lengths: list[int], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(SP.first_normal, SP.vocab_size, size=n) for n in lengths]


def first_fit(lengths: list[int], rows: int, length: int) -> Packing:
    filler = RowFiller(rows, length)
    assert all(filler.place(n) for n in lengths)
    return filler.packing


def packed_sentences(lengths: list[int], languages: bool = True, seed: int = 0):
    """Unpacked and packed tensors of sentences of these lengths (rows of 32 tokens)."""
    langs = np.arange(len(lengths)) % 3 if languages else None
    unpacked = sentence_layout(sentences(lengths, seed), langs, SP).tensors()
    packing = first_fit([n + 2 for n in lengths], rows=3, length=32)
    return unpacked, pack_batch(unpacked, packing, SP.pad), packing


def model_of(**overrides) -> MaskedLanguageModel:
    torch.manual_seed(0)
    return MaskedLanguageModel(tiny_config(num_languages=3, **overrides)).eval()


LENGTHS = [12, 5, 20, 3, 9, 14, 1]


@pytest.mark.parametrize("position_bias", ["none", "relative"])
def test_each_packed_sentence_is_encoded_as_if_alone(position_bias):
    """The defining property: packing changes where a sentence sits, never what the encoder makes of it
    (attention kept inside it, its own positions and language ids)."""
    model = model_of(position_bias=position_bias)
    unpacked, packed, packing = packed_sentences(LENGTHS)
    assert packed["input_ids"].shape == (3, 32)  # 7 sentences in 3 rows
    with torch.no_grad():
        together = model(**model_inputs(packed)).last_hidden_state
        for b, (row, start) in enumerate(packing.placement):
            n = LENGTHS[b] + 2
            alone = model(
                unpacked["input_ids"][b : b + 1, :n], language_ids=unpacked["language_ids"][b : b + 1, :n]
            ).last_hidden_state[0]
            torch.testing.assert_close(together[row, start : start + n], alone)


def test_no_attention_across_sentences_in_a_row():
    """Changing one sentence changes its own outputs and no other's."""
    model = model_of()
    _, packed, packing = packed_sentences(LENGTHS)
    row, start = packing.placement[2]
    changed = {**packed, "input_ids": packed["input_ids"].clone()}
    changed["input_ids"][row, start + 1 : start + 21] = SP.mask
    with torch.no_grad():
        before = model(**model_inputs(packed)).last_hidden_state
        after = model(**model_inputs(changed)).last_hidden_state
    own = packed["example_ids"] == 2
    assert not torch.allclose(before[own], after[own])
    torch.testing.assert_close(before[~own], after[~own], rtol=0, atol=0)


def test_positions_languages_and_sides_restart_with_each_example():
    pairs_first, pairs_second = sentences([4, 7, 2], seed=1), sentences([6, 3, 5], seed=2)
    first_languages, second_languages = [0, 1, 2], [2, 0, 1]
    layout = pair_layout(pairs_first, pairs_second, np.array(first_languages), np.array(second_languages), SP, "xlm")
    unpacked = layout.tensors()
    n = [len(x) + len(y) + 4 for x, y in zip(pairs_first, pairs_second, strict=True)]
    packing = first_fit(n, rows=1, length=row_length(sum(n)))
    packed = pack_batch(unpacked, packing, SP.pad)
    ids = packed["example_ids"][0]
    for b, (_, start) in enumerate(packing.placement):
        first, second = len(pairs_first[b]) + 2, len(pairs_second[b]) + 2
        positions = packed["position_ids"][0, start : start + n[b]].tolist()
        assert positions == list(range(first)) + list(range(second))  # XLM: each side from 0
        languages = [first_languages[b]] * first + [second_languages[b]] * second
        assert packed["language_ids"][0, start : start + n[b]].tolist() == languages
        assert packed["segment"][0, start : start + n[b]].tolist() == [0] * first + [1] * second
        assert (ids[start : start + n[b]] == b).all()
    end = max(s + k for (_, s), k in zip(packing.placement, n, strict=True))
    assert (ids[end:] == -1).all() and (packed["input_ids"][0, end:] == SP.pad).all()
    assert not packed["attention_mask"][0, end:].any() and packed["attention_mask"][0, :end].all()


@pytest.mark.parametrize("objective", ["mlm", "tlm"])
def test_packed_masked_lm_loss_equals_the_unpacked_loss(objective):
    """Same examples, same masks: the loss (the mean over every target of every example) and its gradients
    are those of the unpacked batch."""
    rng = np.random.default_rng(0)
    if objective == "mlm":
        obj = MLM(MLMConfig(), SP, tiny_config(num_languages=3))
        raw = MonoBatch(sentences(LENGTHS), np.arange(len(LENGTHS)) % 3)
        n = [k + 2 for k in LENGTHS]
    else:
        obj = TLM(TLMConfig(), SP, tiny_config(num_languages=3))
        first, second = sentences([4, 9, 2, 11], seed=1), sentences([6, 3, 8, 5], seed=2)
        raw = ParallelBatch(first, second, np.array([0, 1, 2, 0]), np.array([2, 0, 1, 1]))
        n = [len(x) + len(y) + 4 for x, y in zip(first, second, strict=True)]
    unpacked = obj.make_batch(raw, rng)
    packed = pack_batch(unpacked, first_fit(n, rows=3, length=32), SP.pad)
    results = []
    for batch in (unpacked, packed):
        model = model_of()
        loss = masked_lm_output(model, batch).loss
        loss.backward()
        results.append((loss.detach(), model.encoder.layers[0].attention.qkv.weight.grad))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_pooling_packed_rows_per_example_equals_pooling_each_row(pooling):
    model = model_of()
    unpacked, packed, _ = packed_sentences(LENGTHS)
    with torch.no_grad():
        each = pool(model(**model_inputs(unpacked)).last_hidden_state, unpacked["attention_mask"], pooling)
        hidden = model(**model_inputs(packed)).last_hidden_state
    torch.testing.assert_close(pool_examples(hidden, packed["example_ids"], len(LENGTHS), pooling), each)


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_packed_contrast_reads_each_side_alone_as_unpacked(pooling):
    """Translation ranking on packed rows (both sides of a pair in the pair's place, one encoder pass): the
    sentence vectors, so the loss and its gradients, are those of the two unpacked passes."""
    objective = SentenceContrast(ContrastConfig(pooling=pooling), SP, tiny_config())
    first, second = sentences([4, 9, 2, 11, 7], seed=1), sentences([6, 3, 8, 5, 2], seed=2)
    raw = ParallelBatch(first, second, np.zeros(5, dtype=np.int64), np.ones(5, dtype=np.int64))
    n = [len(x) + len(y) + 4 for x, y in zip(first, second, strict=True)]
    packed = objective.make_training_batch(
        dataclasses.replace(raw, packing=first_fit(n, rows=3, length=32)), np.random.default_rng(0)
    )
    assert packed["input_ids"].shape == (3, 32)
    results = []
    for batch in (objective.make_training_batch(raw, np.random.default_rng(0)), packed):
        model = model_of()
        output = objective(model, batch)
        output.loss.backward()
        results.append((output.loss.detach(), model.encoder.layers[0].attention.qkv.weight.grad))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])


def test_flex_attention_path_equals_the_materialised_mask(monkeypatch):
    """What CUDA runs (FlexAttention with a document block mask) against the explicit path with the
    materialised (B, 1, T, T) mask; FlexAttention runs its forward on a CPU too."""
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    model = model_of(num_heads=2)  # heads of 16, the narrowest FlexAttention's CUDA kernel takes
    _, packed, _ = packed_sentences(LENGTHS)
    with torch.no_grad():
        materialised = model(**model_inputs(packed)).last_hidden_state
        monkeypatch.setattr(packed_attention, "FLEX_ATTENTION_DEVICES", ("cpu",))
        assert packed_attention.flex_attention_fits(model.config, model.training, torch.device("cpu"))
        flex = model(**model_inputs(packed)).last_hidden_state
        # and attention alone, on random queries, keys and values
        q, k, v = torch.randn(3, 3, 2, 32, 16).unbind(0)
        ids = packed["example_ids"]
        expected = attend(q, k, v, packed_attention.packed_attention_mask(ids, flex=False), Dropout(0.0))
        got = attend(q, k, v, packed_attention.packed_attention_mask(ids, flex=True), Dropout(0.0))
    real = packed["attention_mask"]
    torch.testing.assert_close(flex[real], materialised[real])
    torch.testing.assert_close(got.transpose(1, 2)[real], expected.transpose(1, 2)[real])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_compiled_flex_attention_on_cuda_equals_the_materialised_mask_in_values_and_gradients(monkeypatch):
    model = model_of(num_heads=2).cuda()
    _, packed, _ = packed_sentences(LENGTHS)
    packed = {k: v.cuda() for k, v in packed.items()}
    real = packed["attention_mask"]
    results = []
    for devices in (("cuda",), ()):
        monkeypatch.setattr(packed_attention, "FLEX_ATTENTION_DEVICES", devices)
        assert packed_attention.flex_attention_fits(model.config, False, torch.device("cuda")) == bool(devices)
        model.zero_grad()
        hidden = model(**model_inputs(packed)).last_hidden_state[real]
        hidden.square().sum().backward()
        results.append([hidden.detach()] + [p.grad.clone() for p in model.parameters() if p.grad is not None])
    for flex, materialised in zip(*results, strict=True):
        torch.testing.assert_close(flex, materialised, rtol=1e-2, atol=1e-3)  # TF32 dots at most


def test_flex_attention_waits_for_what_it_lacks(monkeypatch):
    """No FlexAttention under a position bias, with attention dropout while training or with heads narrower than
    its CUDA kernel takes: those take the materialised mask."""
    monkeypatch.setattr(packed_attention, "FLEX_ATTENTION_DEVICES", ("cpu",))

    def fits(training: bool = False, **overrides) -> bool:
        return packed_attention.flex_attention_fits(tiny_config(**overrides), training, torch.device("cpu"))

    assert fits(num_heads=2) and fits(num_heads=2, attention_dropout=0.1)  # heads of 16; dropout off in eval
    assert not fits()  # heads of 8
    assert not fits(num_heads=2, position_bias="relative")
    assert not fits(True, num_heads=2, attention_dropout=0.1)


def shard_of(tmp_path, lengths: list[int]) -> TokenShard:
    w = ShardWriter(tmp_path / "s", np.uint16)
    w.add([[10 + i % 50] * n for i, n in enumerate(lengths)])
    w.close()
    return TokenShard(tmp_path / "s", np.uint16)


def test_packed_stream_fills_rows_under_a_real_token_budget(tmp_path):
    lengths = np.random.default_rng(0).integers(1, 31, size=300).tolist()
    cfg = StreamConfig(max_tokens=256, max_length=30, pack=False)
    stream = MonoStream([shard_of(tmp_path, lengths)], [0], cfg, seed=0, packed=True)
    plain = MonoStream([shard_of(tmp_path, lengths)], [0], cfg, seed=0)
    packed_count = plain_count = 0
    for _ in range(20):
        batch = stream.next_batch()
        p = batch.packing
        assert (p.rows, p.length) == (256 // 32, 32)  # rows of the longest example (30 + 2), rounded to 8
        used = np.zeros((p.rows, p.length), dtype=int)
        for s, (row, start) in zip(batch.sentences, p.placement, strict=True):
            used[row, start : start + len(s) + 2] += 1
        assert used.max() == 1  # examples never overlap, and all fit
        packed_count += len(batch.sentences)
        plain_count += len(plain.next_batch().sentences)
    assert packed_count > 1.3 * plain_count  # the budget holds real tokens, not padding


def test_packed_rows_capped_by_examples_hold_no_empty_row(tmp_path):
    cfg = StreamConfig(max_tokens=256, max_length=30, pack=False, max_examples=3)
    stream = MonoStream([shard_of(tmp_path, [4] * 50)], [0], cfg, seed=0, packed=True)
    batch = stream.next_batch()
    assert len(batch.sentences) == 3 and batch.packing.rows == 1  # 3 x (4 + 2) tokens share the first row


def test_packed_stream_resumes_exactly(tmp_path):
    lengths = np.random.default_rng(1).integers(1, 31, size=100).tolist()
    shard = shard_of(tmp_path, lengths)
    cfg = StreamConfig(max_tokens=128, max_length=30, pack=False)
    a = ParallelStream([(shard, shard)], [(0, 1)], cfg, seed=0, packed=True)
    assert a.next_batch().packing.length == row_length(2 * 30 + 4)
    state = a.state_dict()
    b = ParallelStream([(shard, shard)], [(0, 1)], cfg, seed=9, packed=True)
    b.load_state_dict(state)
    for _ in range(3):
        x, y = a.next_batch(), b.next_batch()
        assert x.packing == y.packing and all(np.array_equal(s, t) for s, t in zip(x.source, y.source, strict=True))


def test_recipe_switch_packs_when_every_objective_reads_packed_rows(tmp_path):
    assert packs_rows(load_recipe("xlm"), "cuda")  # MLM + TLM
    assert not packs_rows(load_recipe("xlm"), "cpu")  # auto: the CPU keeps its measured batches
    assert packs_rows(load_recipe("xlm", ["data.pack=true"]), "cpu")
    assert not packs_rows(load_recipe("xlm", ["data.pack=false"]), "cuda")
    assert not packs_rows(load_recipe("ppa"), "cuda")  # MoCo pools each pair: auto leaves rows unpacked
    with pytest.raises(DataError, match=r"--set data\.pack=true: data\.pack: true, but moco"):
        load_recipe("ppa", ["data.pack=true"])
    # a run whose saved recipe has no `data.pack` trained unpacked, and resumes so
    saved = load_recipe("xlm").to_dict()
    del saved["data"]["pack"]
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(saved))
    assert not packs_rows(load_run_recipe(tmp_path), "cuda")
    assert packs_rows(load_run_recipe(tmp_path, ["data.pack=true"]), "cuda")
    with pytest.raises(DataError, match="data.pack=sometimes: .*pack='sometimes': use true, false or auto"):
        load_recipe("xlm", ["data.pack=sometimes"])


@pytest.mark.integration
def test_pretraining_reads_packed_rows_through_the_trainers_own_step(sample_prepared, tmp_path):
    """`--set data.pack=true` on a tiny MLM + TLM run: the loader hands every objective packed rows, and the
    trainer's step trains on them."""
    recipe = load_recipe("xlm", [*tiny_recipe_overrides(sample_prepared, steps=3), "data.pack=true"])
    run, _ = build_run(recipe, tmp_path / "probe")
    loader = start_loader(run)
    item = next(loader)
    loader.close()
    for batch in item.slots[0].values():  # packed rows within the budget, padding exactly where no example is
        assert batch["example_ids"].numel() <= 512
        assert torch.equal(batch["example_ids"] >= 0, batch["attention_mask"])
    pretrain(recipe, tmp_path / "run", progress=False)
    curve = losses(tmp_path / "run")
    assert [s for s, _ in curve] == [1, 2, 3] and all(np.isfinite(loss) for _, loss in curve)
