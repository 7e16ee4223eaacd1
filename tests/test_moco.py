"""PPA: MoCo sentence alignment with TLM (objectives/moco.py), its recipe, and DDP key gathering."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from polyalign.checkpoint import checkpoint_dirs, load_model, save_model_folder
from polyalign.config import load_recipe
from polyalign.data.masking import IGNORE
from polyalign.data.prepared import PreparedData
from polyalign.data.shards import ShardWriter, TokenShard
from polyalign.data.streams import ParallelBatch, ParallelStream, StreamConfig
from polyalign.io import DataError
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.objectives.base import model_inputs
from polyalign.objectives.moco import (
    MoCo,
    MoCoConfig,
    batch_accuracy,
    enqueue,
    info_nce,
    queue_in_order,
    sentence_vectors,
)
from polyalign.tokenizer import SpecialTokens
from polyalign.train import load_run_recipe, pretrain
from tests.conftest import metrics, tiny_config, tiny_recipe_overrides
from tests.test_train import _run_cli, losses

SPECIAL = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=99, first_normal=5)
EN_LENGTH, XX_LENGTH = 3, 4  # English and the other language differ in length, so a row tells its side


def pairs(n: int, seed: int = 0) -> ParallelBatch:
    """n English (source, ids 10-49) / other-language (target, ids 50-98) pairs."""
    rng = np.random.default_rng(seed)
    return ParallelBatch(
        [rng.integers(10, 50, EN_LENGTH) for _ in range(n)],
        [rng.integers(50, 99, XX_LENGTH) for _ in range(n)],
        np.zeros(n, dtype=np.int64),
        np.ones(n, dtype=np.int64),
    )


def moco(**config) -> tuple[MaskedLanguageModel, MoCo]:
    torch.manual_seed(0)
    model = MaskedLanguageModel(tiny_config())
    objective = MoCo(MoCoConfig(**{"queue_size": 16, "projection_size": 8, **config}), SPECIAL, model.config)
    objective.setup(model)
    return model, objective


def test_queue_holds_the_most_recent_keys_in_order():
    K, D = 10, 3
    queue, pointer, seen = torch.zeros(K, D), 0, []
    for n in (4, 3, 5, 7, 12, 2):  # wraps around several times; one batch is larger than the queue
        keys = torch.randn(n, D)
        pointer = enqueue(queue, pointer, keys)
        seen.append(keys)
        everything = torch.cat(seen)
        if len(everything) >= K:
            assert torch.equal(queue_in_order(queue, pointer), everything[-K:])  # oldest first, newest last


def test_key_encoder_is_the_momentum_average_of_the_query_encoder_after_a_step():
    model, objective = moco(momentum=0.9)
    for k, q in zip(objective.key_encoder.parameters(), model.encoder.parameters(), strict=True):
        assert torch.equal(k, q)  # the key encoder starts as a copy
    trainable = [p for p in [*model.parameters(), *objective.parameters()] if p.requires_grad]
    optimizer = torch.optim.SGD(trainable, lr=0.5)
    batch = objective.make_batch(pairs(8), np.random.default_rng(0))
    objective(model, batch).loss.backward()
    optimizer.step()

    key_before = [p.clone() for p in [*objective.key_encoder.parameters(), *objective.key_projection.parameters()]]
    query_now = [p.clone() for p in [*model.encoder.parameters(), *objective.query_projection.parameters()]]
    assert any(not torch.equal(k, q) for k, q in zip(key_before, query_now, strict=True))  # the step moved them
    objective(model, batch)  # the next forward applies Eq. (1) before encoding keys
    key_after = [*objective.key_encoder.parameters(), *objective.key_projection.parameters()]
    for k, k0, q in zip(key_after, key_before, query_now, strict=True):
        torch.testing.assert_close(k, 0.9 * k0 + 0.1 * q)


@pytest.mark.parametrize("tlm", [True, False])
def test_no_gradient_reaches_the_key_encoder(tlm):
    model, objective = moco(tlm=tlm)
    out = objective(model, objective.make_batch(pairs(8), np.random.default_rng(0)))
    out.loss.backward()
    for p in [*objective.key_encoder.parameters(), *objective.key_projection.parameters()]:
        assert p.grad is None and not p.requires_grad
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in objective.query_projection.parameters())
    assert model.encoder.layers[-1].feed_forward.up.weight.grad.abs().sum() > 0
    assert ("tlm_loss" in out.metrics) == tlm


def test_shuffling_puts_english_on_the_query_side_about_half_the_time_and_orders_tlm_the_same_way():
    _, objective = moco()
    n = 2000
    batch = objective.make_batch(pairs(n), np.random.default_rng(1))
    query_is_english = batch["attention_mask"].sum(1) == EN_LENGTH + 2
    key_is_english = batch["key_attention_mask"].sum(1) == EN_LENGTH + 2
    assert torch.equal(query_is_english, ~key_is_english)  # each pair is split across the two encoders
    assert 0.45 < query_is_english.float().mean() < 0.55
    assert torch.equal(query_is_english, ~batch["swapped"])
    # TLM (PPA style): the query side comes first; no language ids, positions run on.
    labels, ids = batch["tlm_labels"], batch["tlm_input_ids"]
    original = torch.where(labels == IGNORE, ids, labels)
    L = batch["input_ids"].shape[1]
    query_tokens = torch.where(batch["attention_mask"], batch["input_ids"], -1)
    first_sentence = torch.where(batch["tlm_segment"][:, :L] == 0, original[:, :L], -1)
    assert torch.equal(first_sentence, query_tokens)
    assert "tlm_language_ids" not in batch and "language_ids" not in batch
    assert torch.equal(batch["tlm_position_ids"][0], torch.arange(batch["tlm_position_ids"].shape[1]))


def test_info_nce_equals_a_hand_computation():
    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    keys = torch.tensor([[0.6, 0.8], [0.6, 0.8]])
    negatives = torch.tensor([[0.0, 1.0], [-1.0, 0.0]])
    tau = 0.5
    # query 0: positive 0.6, negatives 0 and -1; query 1: positive 0.8, negatives 1 and 0 (a negative wins)
    by_hand = [
        -math.log(math.exp(0.6 / tau) / (math.exp(0.6 / tau) + math.exp(0 / tau) + math.exp(-1 / tau))),
        -math.log(math.exp(0.8 / tau) / (math.exp(0.8 / tau) + math.exp(1 / tau) + math.exp(0 / tau))),
    ]
    loss, accuracy = info_nce(queries, keys, negatives, tau)
    assert float(loss) == pytest.approx(sum(by_hand) / 2, rel=1e-6)
    assert float(accuracy) == 0.5


def test_batch_negatives_add_the_other_keys_of_the_batch_and_only_them():
    # Same vectors as above; with batch negatives query 0 also meets key 1 and query 1 key 0 (never its own).
    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    keys = torch.tensor([[0.6, 0.8], [-0.8, 0.6]])
    negatives = torch.tensor([[0.0, 1.0], [-1.0, 0.0]])
    tau = 0.5
    e = lambda x: math.exp(x / tau)  # noqa: E731
    by_hand = [
        -math.log(e(0.6) / (e(0.6) + e(0) + e(-1) + e(-0.8))),  # + query 0 . key 1
        -math.log(e(0.6) / (e(0.6) + e(1) + e(0) + e(0.8))),  # + query 1 . key 0
    ]
    loss, _ = info_nce(queries, keys, negatives, tau, batch_negatives=True)
    assert float(loss) == pytest.approx(sum(by_hand) / 2, rel=1e-6)
    without, _ = info_nce(queries, keys, negatives, tau)
    assert float(without) < float(loss)


def test_batch_accuracy_ranks_each_query_among_the_batch_keys():
    queries = torch.eye(3)
    keys = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.2, 0.9], [0.0, 0.0, 1.0]])
    # query 1 scores keys (0, 0.2, 0): its own wins; query 2 scores (0, 0.9, 1.0): its own wins
    assert float(batch_accuracy(queries, keys)) == 1.0
    # key 0 now matches query 1 (0.5) better than query 1's own key (0.2): query 1 is wrong, the others not
    keys[0] = torch.tensor([0.3, 0.5, 0.0])
    assert float(batch_accuracy(queries, keys)) == pytest.approx(2 / 3)


# ---------------------------------------------------------------------------------------------------------
# The recipe, end to end on the bundled sample


@pytest.fixture(scope="module")
def tiny_foundation(sample_prepared, tmp_path_factory):
    """A tiny model folder to post-pretrain from, shaped like tiny_recipe_overrides' model."""
    tokenizer = PreparedData(sample_prepared).tokenizer()
    sp = tokenizer.special
    config = EncoderConfig(
        vocab_size=sp.vocab_size,
        pad_token_id=sp.pad,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        ffn_size=64,
        max_positions=128,
    )
    torch.manual_seed(0)
    return save_model_folder(tmp_path_factory.mktemp("foundation") / "tiny", MaskedLanguageModel(config), tokenizer, [])


def ppa_overrides(prepared, init, steps: int) -> list[str]:
    return tiny_recipe_overrides(prepared, steps) + [
        f"init_from={init}",
        "objectives.0.config.queue_size=64",
        "data.parallel.max_examples=4",
        "data.parallel.min_length=3",
        "trainer.save_every=100",
    ]


ABLATIONS = {
    "full": [],
    "no-tlm": ["objectives.0.config.tlm=false"],
    "no-moco": ["objectives.0.name=tlm", "objectives.0.config={style: ppa}"],
}


def test_ppa_recipe_has_the_paper_defaults():
    recipe = load_recipe("ppa")
    (spec,) = recipe.objectives
    assert spec.name == "moco" and spec.config == {
        "momentum": 0.999,
        "queue_size": 32000,
        "temperature": 0.05,
        "projection_size": 300,
        "tlm": True,
        "pooling": "mean",  # the paper's footnote-1 variant: our start models never trained the first token
    }
    p = recipe.data.parallel
    assert (p.max_examples, p.min_length, p.max_pair_length) == (128, 10, 128)
    assert p.max_tokens >= 128 * (128 + 4)  # the token budget never cuts a batch below 128 pairs
    t = recipe.trainer
    assert (t.lr, t.weight_decay, t.warmup_steps * 10) == (3e-5, 0.01, t.max_steps)


@pytest.mark.integration
def test_pair_filter_drops_short_sides_and_long_pairs(tmp_path):
    # PPA §3.1: drop a pair when either side has fewer than 10 tokens or both together more than 128.
    lengths = [(12, 12), (9, 40), (40, 9), (70, 59), (64, 64), (10, 118)]
    shards = []
    for side in (0, 1):
        writer = ShardWriter(tmp_path / f"side{side}", np.uint16)
        writer.add([[5 + i] * pair[side] for i, pair in enumerate(lengths)])
        writer.close()
        shards.append(TokenShard(tmp_path / f"side{side}", np.uint16))
    config = StreamConfig(max_tokens=10_000, max_length=128, min_length=10, max_pair_length=128, max_examples=50)
    batch = ParallelStream([tuple(shards)], [(0, 1)], config, seed=0).next_batch()
    kept = {(len(x), len(y)) for x, y in zip(batch.source, batch.target, strict=True)}
    assert kept == {(12, 12), (64, 64), (10, 118)}
    impossible = StreamConfig(max_tokens=10_000, max_length=128, min_length=200)
    with pytest.raises(DataError, match="all filtered out"):
        ParallelStream([tuple(shards)], [(0, 1)], impossible, seed=0).next_batch()


@pytest.mark.integration
@pytest.mark.parametrize("variant", ABLATIONS)
def test_ppa_recipe_post_pretrains_a_saved_model(sample_prepared, tiny_foundation, tmp_path, variant):
    recipe = load_recipe("ppa", ppa_overrides(sample_prepared, tiny_foundation, steps=2) + ABLATIONS[variant])
    pretrain(recipe, tmp_path / "run", progress=False)
    records = metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2] and all(math.isfinite(r["loss"]) for r in records)
    name = recipe.objectives[0].name
    assert ("moco/moco_loss" in records[0]) == (variant != "no-moco")
    assert ("moco/tlm_loss" in records[0]) == (variant == "full")
    checkpoint = checkpoint_dirs(tmp_path / "run")[-1]
    if name == "moco":
        state = load_file(str(checkpoint / "objectives.safetensors"))
        assert int(state["moco.queue_pointer"]) == 2 * 4  # 2 steps x 4 pairs enqueued
        assert any(k.startswith("moco.key_encoder.") for k in state)
    before, after = load_model(tiny_foundation).model, load_model(tmp_path / "run").model
    assert not torch.equal(before.encoder.layers[0].attention.qkv.weight, after.encoder.layers[0].attention.qkv.weight)


@pytest.mark.integration
def test_ppa_resume_restores_queue_and_key_encoder_exactly(sample_prepared, tiny_foundation, tmp_path):
    overrides = ppa_overrides(sample_prepared, tiny_foundation, steps=4) + ["objectives.0.config.momentum=0.5"]
    pretrain(load_recipe("ppa", overrides), tmp_path / "straight", progress=False)
    pretrain(load_recipe("ppa", overrides + ["trainer.stop_at=2"]), tmp_path / "paused", progress=False)
    pretrain(
        load_run_recipe(tmp_path / "paused", ["trainer.stop_at=0"]), tmp_path / "paused", resume=True, progress=False
    )
    assert losses(tmp_path / "paused") == losses(tmp_path / "straight")


@pytest.mark.integration
def test_ddp_gathers_keys_from_every_process_before_enqueueing(sample_prepared, tiny_foundation, tmp_path):
    overrides = ppa_overrides(sample_prepared, tiny_foundation, steps=1) + ["model.dropout=0", "trainer.precision=fp32"]
    sets = [a for o in overrides for a in ("--set", o)]
    ddp = _run_cli(["pretrain", "ppa", "--run-dir", str(tmp_path / "ddp"), "--no-progress", *sets], nproc=2)
    assert ddp.returncode == 0, ddp.stderr[-2000:]
    # One process with 2 accumulation steps reads the same two micro-batches (slot = rank x A + a) and, at
    # step 1, encodes keys with the same (initial) key encoder: its queue is what gathering must produce.
    single = _run_cli(
        ["pretrain", "ppa", "--run-dir", str(tmp_path / "single"), "--no-progress", *sets]
        + ["--set", "trainer.grad_accumulation=2"]
    )
    assert single.returncode == 0, single.stderr[-2000:]
    a, b = (load_file(str(checkpoint_dirs(tmp_path / r)[-1] / "objectives.safetensors")) for r in ("ddp", "single"))
    assert int(a["moco.queue_pointer"]) == int(b["moco.queue_pointer"]) == 2 * 4  # both processes' keys
    torch.testing.assert_close(a["moco.queue"][:8], b["moco.queue"][:8])


# ---------------------------------------------------------------------------------------------------------
# Pooling, precision, and a toy task MoCo must learn


def test_sentence_vectors_pool_the_first_token_or_the_real_tokens_only():
    hidden = torch.tensor([[[3.0, 4.0], [1.0, 0.0], [9.0, 9.0]], [[0.0, 2.0], [2.0, 0.0], [4.0, 4.0]]])
    mask = torch.tensor([[True, True, False], [True, True, True]])  # row 0: the last position is padding
    first = sentence_vectors(hidden, mask, "first")
    torch.testing.assert_close(first, torch.tensor([[0.6, 0.8], [0.0, 1.0]]))
    mean = sentence_vectors(hidden, mask, "mean")  # row 0: mean of (3, 4), (1, 0) = (2, 2); row 1: (2, 2)
    torch.testing.assert_close(mean, torch.full((2, 2), 2**-0.5))
    with pytest.raises(ValueError, match="pooling='cls'"):
        MoCoConfig(pooling="cls")


def test_info_nce_runs_in_fp32_outside_autocast(monkeypatch):
    import polyalign.objectives.moco as moco_module

    seen = []

    def spy(queries, keys, negatives, temperature, batch_negatives=False):
        seen.append((queries.dtype, keys.dtype, negatives.dtype, torch.is_autocast_enabled("cpu")))
        return info_nce(queries, keys, negatives, temperature, batch_negatives)

    monkeypatch.setattr(moco_module, "info_nce", spy)
    model, objective = moco()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        objective(model, objective.make_batch(pairs(4), np.random.default_rng(0)))
    assert seen == [(torch.float32, torch.float32, torch.float32, False)]


def translation_pairs(n: int, rng: np.random.Generator) -> ParallelBatch:
    """A toy bitext: the 'translation' of token t (10-49) is t + 49, in reverse order; lengths 3-6."""
    source = [rng.integers(10, 50, rng.integers(3, 7)) for _ in range(n)]
    return ParallelBatch(
        source, [s[::-1] + 49 for s in source], np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64)
    )


def test_projection_size_0_scores_the_pooled_states_themselves():
    # The ablation of Eq. (2): no head, so the queries are the normalised pooled states retrieval reads.
    model, objective = moco(projection_size=0, tlm=False)
    assert not list(objective.query_projection.parameters())
    assert objective.queue.shape == (16, model.config.hidden_size)
    batch = objective.make_batch(translation_pairs(4, np.random.default_rng(0)), np.random.default_rng(0))
    hidden = model(**model_inputs(batch)).last_hidden_state
    expected = sentence_vectors(hidden, batch["attention_mask"], "mean")
    torch.testing.assert_close(F.normalize(objective.query_projection(expected), dim=-1), expected)
    objective(model, batch)  # trains through the whole path with hidden-size keys
    with pytest.raises(ValueError, match="projection_size"):
        MoCoConfig(projection_size=-1)


def train_toy(steps: int = 50, **config) -> tuple[list[float], list[float], list[float]]:
    """MoCo on the toy bitext (K = 64, B = 32): losses, queue accuracies, batch accuracies per step."""
    model, objective = moco(queue_size=64, tlm=False, projection_size=16, **config)
    trainable = [p for p in [*model.parameters(), *objective.parameters()] if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=3e-3)
    rng = np.random.default_rng(0)
    losses, accuracies, fresh = [], [], []
    for _ in range(steps):
        out = objective(model, objective.make_batch(translation_pairs(32, rng), rng))
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(float(out.metrics["moco_loss"]))
        accuracies.append(float(out.metrics["moco_accuracy"]))
        fresh.append(float(out.metrics["moco_batch_accuracy"]))
    return losses, accuracies, fresh


@pytest.mark.integration
def test_moco_learns_to_pick_the_translation_out_of_the_queue():
    # The defining property: the query ranks its own translation's key above K queued keys of other
    # sentences. Chance is loss ln(K + 1) and accuracy 1 / (K + 1); a dead signal (a pooled vector that does
    # not depend on the sentence, no gradient into the query side, keys not the queries' translations)
    # stays there.
    losses, accuracies, _ = train_toy(momentum=0.9)
    assert np.mean(losses[-10:]) < 0.5 * math.log(64 + 1)
    assert np.mean(accuracies[-10:]) > 0.5  # chance: 1 / 65


@pytest.mark.integration
def test_batch_negatives_make_moco_tell_translations_apart_from_fresh_keys():
    # Without them the toy run above ranks its positive first among 65 queue keys 84% of the time, but among
    # its own batch's 32 fresh keys only 41% (a query can spot the one key from the current key encoder);
    # scoring the batch's other keys too removes that shortcut, and the batch accuracy follows.
    _, accuracies, fresh = train_toy(momentum=0.9, batch_negatives=True)
    assert np.mean(fresh[-10:]) > 0.8  # chance: 1 / 32
    assert np.mean(accuracies[-10:]) > 0.5
