"""BUCC mining: margin candidates, XTREME's threshold choice, F1 against gold id pairs."""

import gzip
import json

import numpy as np
import pytest

from polyalign.evaluate.bucc import best_threshold, mine_ids, precision_recall_f1


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def comparable_corpus(planted: int = 20, seed: int = 0):
    """Unrelated sentences on both sides, plus `planted` translations (y = x + a little noise)."""
    rng = np.random.default_rng(seed)
    x_other, y_other = rng.normal(size=(150, 32)), rng.normal(size=(250, 32))
    x_planted = rng.normal(size=(planted, 32))
    y_planted = x_planted + 0.1 * rng.normal(size=(planted, 32))
    x, y = np.concatenate([x_other, x_planted]), np.concatenate([y_planted, y_other])
    src = {f"zh-{i}": i for i in range(len(x))}
    tgt = {f"en-{j}": j for j in range(len(y))}
    gold = {(f"zh-{150 + p}", f"en-{p}") for p in range(planted)}
    return unit(x), unit(y), src, tgt, gold


def test_mining_finds_every_planted_pair():
    x, y, src, tgt, gold = comparable_corpus()
    threshold, mined, candidates = mine_ids(x, y, src, tgt, gold)
    assert mined == gold and precision_recall_f1(mined, gold) == (1.0, 1.0, 1.0)
    assert candidates > 3 * len(gold)  # the unrelated sentences were candidates too, all below the threshold


def test_recall_drops_by_the_removed_share_when_gold_translations_are_missing():
    x, y, src, tgt, gold = comparable_corpus()
    removed = {f"en-{p}" for p in range(5)}  # 5 of the 20 translations are not in the English corpus
    keep = [j for j in range(len(y)) if f"en-{j}" not in removed]
    tgt = {f"en-{j}": row for row, j in enumerate(keep)}
    _, mined, _ = mine_ids(x, y[keep], src, tgt, gold)
    precision, recall, f1 = precision_recall_f1(mined, gold)
    assert (precision, recall) == (1.0, 15 / 20)
    assert f1 == pytest.approx(2 * 0.75 / 1.75)


def test_a_text_under_two_ids_is_mined_under_both():
    x, y, src, tgt, gold = comparable_corpus()
    src["zh-dup"] = src["zh-150"]  # the same source sentence occurs twice in the corpus
    gold = gold | {("zh-dup", "en-0")}
    _, mined, _ = mine_ids(x, y, src, tgt, gold)
    assert mined == gold


def test_threshold_is_xtremes_bucc_optimize():
    # Walking down the scores: F1 = 0.5, 0.4, 0.667, 0.571 (3 gold pairs); the best is after the third
    # candidate, and the threshold lies midway to the fourth.
    scores, correct = np.array([0.6, 0.9, 0.7, 0.8]), np.array([False, True, True, False])
    assert best_threshold(scores, correct, n_gold=3) == pytest.approx(0.65)
    assert best_threshold(scores, np.zeros(4, dtype=bool), n_gold=3) == float("inf")


def test_cli_mines_planted_copies_from_files(sample_prepared, tmp_path):
    from typer.testing import CliRunner

    from polyalign.checkpoint import write_model_files
    from polyalign.cli import app
    from polyalign.data.prepared import PreparedData
    from polyalign.model import MaskedLanguageModel
    from tests.conftest import SAMPLE, tiny_config

    data = PreparedData(sample_prepared)
    english = [t for t in (SAMPLE / "tatoeba" / "tatoeba.deu-eng.eng").read_text().splitlines() if t][:60]
    german = [t for t in (SAMPLE / "tatoeba" / "tatoeba.deu-eng.deu").read_text().splitlines() if t][:40]
    # The "translations" are copies, so a model without language embeddings gives them cosine 1.
    src = [f"de-{i}\t{t}" for i, t in enumerate(german + english[:8])]
    tgt = [f"en-{j}\t{t}" for j, t in enumerate(english)]
    gold = [f"de-{40 + j}\ten-{j}" for j in range(8)]
    bucc = tmp_path / "bucc"  # the output goes beside the evaluation files, never inside them
    bucc.mkdir()
    for name, lines in (("de-en.dev.de", src), ("de-en.dev.en", tgt), ("de-en.dev.gold", gold)):
        with gzip.open(bucc / f"{name}.gz", "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    model = MaskedLanguageModel(tiny_config(vocab_size=data.meta["vocab_size"])).eval()
    (tmp_path / "model").mkdir()
    write_model_files(tmp_path / "model", model, data.tokenizer(), data.languages)
    args = ["evaluate", "bucc", "--model", str(tmp_path / "model"), "--data", str(bucc), "--pair", "de-en"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out"), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "bucc.json").read_text())
    assert report["f1"] == 100.0 and report["layer"] == 1 and report["gold"] == 8
    assert "threshold that maximises F1" in report["protocol"] and "layer 1" in report["protocol"]
