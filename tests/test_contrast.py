"""Sentence contrast (in-batch translation ranking), one-language-pair batches, per-objective streams, and
the dev split of the bitext."""

import math

import numpy as np
import pytest
import torch

from polyalign.config import DataConfig, ObjectiveSpec
from polyalign.data.streams import ParallelBatch, ParallelStream, StreamConfig
from polyalign.model import MaskedLanguageModel
from polyalign.objectives import OBJECTIVES
from polyalign.objectives.contrast import pool, translation_ranking_loss
from polyalign.tokenizer import SpecialTokens
from tests.conftest import tiny_config

SP = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=99, first_normal=5)


def test_ranking_loss_equals_a_hand_computation_with_margin():
    s = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    t = torch.tensor([[1.0, 1.0], [0.0, 1.0]])  # cos(s0,t0)=0.707, cos(s0,t1)=0, cos(s1,t0)=0.707, cos(s1,t1)=1
    tau, m = 0.5, 0.2
    c = torch.tensor([[math.sqrt(0.5), 0.0], [math.sqrt(0.5), 1.0]])
    logits = (c - m * torch.eye(2)) / tau
    rows = -(torch.log_softmax(logits, 1).diagonal()).mean()  # source -> target
    cols = -(torch.log_softmax(logits, 0).diagonal()).mean()  # target -> source
    loss, accuracy = translation_ranking_loss(s, t, tau, m)
    torch.testing.assert_close(loss, (rows + cols) / 2)
    # rows: s0 -> t0 right, s1 -> t1 right; columns: t0 -> s0 (tie 0.707 = 0.707, argmax takes s0), t1 -> s1
    assert accuracy == 1.0


def test_ranking_loss_is_symmetric_and_low_only_for_matching_rows():
    torch.manual_seed(0)
    x = torch.randn(16, 8)
    matched, _ = translation_ranking_loss(x, x + 0.01 * torch.randn_like(x), 0.05)
    shuffled, accuracy = translation_ranking_loss(x, x[torch.randperm(16)], 0.05)
    assert matched < 0.1 < shuffled
    assert accuracy < 0.5
    a, b = torch.randn(8, 4), torch.randn(8, 4)
    torch.testing.assert_close(translation_ranking_loss(a, b, 0.1)[0], translation_ranking_loss(b, a, 0.1)[0])


def test_mean_pooling_ignores_padding():
    h = torch.randn(2, 5, 3)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    torch.testing.assert_close(pool(h, mask)[0], h[0, :3].mean(0))
    h2 = h.clone()
    h2[0, 3:] = 100.0  # what sits at padded positions must not matter
    torch.testing.assert_close(pool(h2, mask), pool(h, mask))
    torch.testing.assert_close(pool(h, mask, "first"), h[:, 0])


def synthetic_pairs(rng, n, offset=40, vocab=(5, 45)):
    """A toy 'translation': target token = source token + offset, reversed order (word order differs)."""
    src = [rng.integers(*vocab, size=int(rng.integers(3, 9))) for _ in range(n)]
    return ParallelBatch(src, [s[::-1] + offset for s in src], np.zeros(n, dtype=np.int64), np.ones(n, np.int64))


@pytest.mark.integration
def test_contrast_learns_to_rank_translations_of_held_out_sentences():
    """The defining property: after training, a held-out source's nearest target in a batch is its own
    translation. Chance is 1/32; a loss that paired the wrong rows or pooled padding stays near it."""
    torch.manual_seed(0)
    config = tiny_config()
    model = MaskedLanguageModel(config)
    objective = OBJECTIVES["contrast"](OBJECTIVES["contrast"].Config(temperature=0.1), SP, config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    held_out = objective.make_batch(synthetic_pairs(np.random.default_rng(99), 32), rng)
    model.eval()
    with torch.no_grad():
        before = float(objective(model, held_out).metrics["accuracy"])
    model.train()
    for _ in range(60):
        loss = objective(model, objective.make_batch(synthetic_pairs(rng, 32), rng)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        after = objective(model, held_out)
    assert before < 0.3
    assert float(after.metrics["accuracy"]) > 0.8
    assert float(after.loss) < math.log(32) / 2


def test_contrast_gradients_reach_the_encoder_and_loss_is_fp32_under_autocast():
    config = tiny_config()
    model = MaskedLanguageModel(config)
    objective = OBJECTIVES["contrast"](OBJECTIVES["contrast"].Config(layer=1), SP, config)
    batch = objective.make_batch(synthetic_pairs(np.random.default_rng(0), 6), np.random.default_rng(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = objective(model, batch)
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)
    out.loss.backward()
    # the first layer's weights get gradient: the loss flows through every layer below the pooled one
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.encoder.layers[0].parameters())


class FakeShard:
    def __init__(self, n, lang_token):
        self.lines = [np.full(3 + i % 4, lang_token) for i in range(n)]

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, i):
        return self.lines[i]

    def length(self, i):
        return len(self.lines[i])

    @property
    def num_tokens(self):
        return sum(len(x) for x in self.lines)


def test_one_pair_per_batch_gives_batches_of_one_language_pair_and_resumes_exactly():
    pairs = [(FakeShard(50, 10 + k), FakeShard(50, 20 + k)) for k in range(3)]
    languages = [(0, 1), (0, 2), (0, 3)]
    config = StreamConfig(max_tokens=64, max_length=8, one_pair_per_batch=True)
    stream = ParallelStream(pairs, languages, config, seed=[1])
    seen = set()
    for _ in range(20):
        batch = stream.next_batch()
        assert len(set(batch.target_languages.tolist())) == 1
        assert len({int(s[0]) for s in batch.source}) == 1  # the shard's marker token: one pair's text
        seen.add(int(batch.target_languages[0]))
    assert seen == {1, 2, 3}
    state = stream.state_dict()
    expected = [stream.next_batch().target_languages.tolist() for _ in range(5)]
    stream.load_state_dict(state)
    assert [stream.next_batch().target_languages.tolist() for _ in range(5)] == expected
    mixed = ParallelStream(pairs, languages, StreamConfig(max_tokens=64, max_length=8), seed=[1])
    assert any(len(set(mixed.next_batch().target_languages.tolist())) > 1 for _ in range(20))


def test_an_objective_stream_override_applies_to_that_objective_only():
    data = DataConfig(parallel=StreamConfig(max_tokens=4096, max_examples=512, one_pair_per_batch=True))
    tlm = ObjectiveSpec("tlm", stream={"max_examples": 64, "one_pair_per_batch": False})
    own = data.for_objective(tlm)
    assert own.parallel.max_examples == 64 and not own.parallel.one_pair_per_batch
    assert data.parallel.max_examples == 512 and data.for_objective(ObjectiveSpec("contrast")) is data


def test_prepare_holds_out_a_dev_split_in_tatoeba_layout(tmp_path):
    from polyalign.data.prepare import PrepareConfig, discover_corpus, prepare
    from polyalign.data.prepared import PreparedData
    from tests.conftest import SAMPLE

    corpus = discover_corpus(None, SAMPLE / "parallel", ["en", "de", "fr"])
    out = tmp_path / "prepared"
    meta = prepare(corpus, PrepareConfig(out=out, vocab_size=500, dev_pairs=25))
    assert meta["dev_pairs"] == {"en-de": 25, "en-fr": 25}
    de = (out / "dev" / "tatoeba.deu-eng.deu").read_text(encoding="utf-8").splitlines()
    en = (out / "dev" / "tatoeba.deu-eng.eng").read_text(encoding="utf-8").splitlines()
    assert len(de) == len(en) == 25
    source = (SAMPLE / "parallel" / "en-de.de").read_text(encoding="utf-8").splitlines()
    target = (SAMPLE / "parallel" / "en-de.en").read_text(encoding="utf-8").splitlines()
    assert all((e, d) in set(zip(target, source, strict=True)) for d, e in zip(de, en, strict=True))
    shards = PreparedData(out).parallel_shards(["en", "de"])
    ((_, _, s, _),) = shards.values()
    assert len(s) == 300 - 25  # held-out pairs never reach the training shards
