"""The whole alignment path: `polyalign align` and `polyalign evaluate alignment` with a tiny model built here."""

import json
import re

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from polyalign.align.aer import alignment_error_rate, read_gold
from polyalign.align.aligner import PROTOCOL_VERSION, Aligner
from polyalign.align.extract import subword_links
from polyalign.align.reading import default_encoding
from polyalign.checkpoint import load_model
from polyalign.cli import app
from polyalign.data.layout import sentence_layout
from polyalign.io import DataError
from tests.conftest import SAMPLE

runner = CliRunner()
PHARAOH = re.compile(r"^(\d+-\d+( \d+-\d+)*)?$")


@torch.no_grad()
def reference_links(loaded, source, target, method, layer, encoding, languages):
    """The per-pair path, kept only as a test oracle: one pair alone, fp32, every layer, its own unpadded
    (n, m) matrix, subword links lifted to words with a loop ("two aligned subwords align their words")."""
    tok, sp, model = loaded.tokenizer, loaded.tokenizer.special, loaded.model.eval()
    (si, sw), (ti, tw) = tok.encode_words([source])[0], tok.encode_words([target])[0]
    lang = [loaded.language_id(code) for code in languages]
    lang = None if None in lang else [np.array([k]) for k in lang]
    if encoding == "separate":
        states = []
        for ids, language in zip((si, ti), lang or (None, None), strict=True):
            inputs = sentence_layout([np.array(ids)], language, sp).tensors()
            del inputs["segment"]
            states.append(model(**inputs, output_hidden_states=True).hidden_states[layer][0, 1 : 1 + len(ids)])
        hs, ht = states
    else:
        # `<s> x </s> y </s>` with positions running on for every model, each side's language id when the model
        # has language embeddings (never XLM's restart at y: a diagonal prior, aligner.py's docstring)
        ids = [sp.cls, *si, sp.sep, *ti, sp.sep]
        inputs = {"input_ids": torch.tensor([ids]), "position_ids": torch.arange(len(ids))[None]}
        inputs["attention_mask"] = torch.ones(1, len(ids), dtype=torch.bool)
        if lang is not None:
            inputs["language_ids"] = torch.tensor(
                [[int(lang[0][0])] * (len(si) + 2) + [int(lang[1][0])] * (len(ti) + 1)]
            )
        h = model(**inputs, output_hidden_states=True).hidden_states[layer][0]
        hs, ht = h[1 : 1 + len(si)], h[len(si) + 2 : len(si) + 2 + len(ti)]

    # a bare "▁" piece inside a longer word is encoded but never linked (aligner.py, unlink_bare_boundaries)
    def linkable(ids, words):
        return torch.tensor([not (tok.id_to_piece(t) == "▁" and words.count(words[k]) > 1) for k, t in enumerate(ids)])

    mask = linkable(si, sw)[:, None] & linkable(ti, tw)[None, :]
    links = subword_links(method, hs, ht, mask)
    return sorted({(sw[i], tw[j]) for i, j in links.nonzero().tolist()})


@pytest.mark.integration
@pytest.mark.parametrize("encoding", ["separate", "pair"])
def test_batched_fp32_path_gives_the_links_of_the_per_pair_reference(tiny_model, encoding):
    # Length-sorted padded batches (small, so most pairs share a batch with longer ones), an encoder stopped
    # at the layer read, batched Sinkhorn/filtering and vectorised lifting must change no link at all.
    loaded = load_model(tiny_model)
    aligner = Aligner(loaded, encoding=encoding, batch_tokens=300, precision="fp32")
    for name in ("de-en", "en-fr", "zh-en"):
        gold = read_gold(SAMPLE / "word_alignment" / name)
        pairs = list(zip(gold.source, gold.target, strict=True))
        for method in ("ot", "argmax", "itermax"):
            expected = [reference_links(loaded, s, t, method, 1, encoding, gold.languages) for s, t in pairs]
            assert aligner.align(pairs, method, 1, gold.languages) == expected, (name, method)


@pytest.mark.integration
@pytest.mark.parametrize("encoding", ["separate", "pair"])
def test_one_padded_batch_of_very_different_lengths_keeps_every_pairs_links_and_order(tiny_model, encoding):
    # All pairs in one batch, long ones first in the input: a one-word pair sits beside a 40-word one, so
    # nearly all of its (n, m) matrix is padding (Sinkhorn, filtering, argmax and lifting must mask it), and
    # the length sort puts it first (the links must come back in input order).
    gold = read_gold(SAMPLE / "word_alignment" / "de-en")
    long_source, long_target = sum(gold.source[:3], []), sum(gold.target[:3], [])
    pairs = [(long_source, long_target), (["Ja"], ["Yes"]), (gold.source[0], ["Yes"]), (["Ja"], gold.target[1])]
    pairs += list(zip(gold.source[3:8], gold.target[3:8], strict=True))
    loaded = load_model(tiny_model)
    aligner = Aligner(loaded, encoding=encoding, batch_tokens=10**6, precision="fp32")
    for method in ("ot", "argmax", "itermax"):
        expected = [reference_links(loaded, s, t, method, 1, encoding, gold.languages) for s, t in pairs]
        assert aligner.align(pairs, method, 1, gold.languages) == expected, method


@pytest.mark.integration
def test_bf16_encoding_keeps_the_aer_of_fp32_on_the_bundled_gold(tiny_model):
    # bf16 is the default encoder precision: it may move a few links (small-base, de-en gold: 99.3% of the
    # links shared, AER 81.52 vs 81.51), but the alignment math after the encoder stays fp32.
    loaded = load_model(tiny_model)
    for name in ("de-en", "en-fr", "zh-en"):
        gold = read_gold(SAMPLE / "word_alignment" / name)
        pairs = list(zip(gold.source, gold.target, strict=True))
        links, scores = [], []
        for precision in ("fp32", "bf16"):
            links.append(Aligner(loaded, encoding="pair", precision=precision).align(pairs, "ot", 2, gold.languages))
            scores.append(alignment_error_rate(links[-1], gold.sure, gold.possible).aer)
        shared = sum(len(set(a) & set(b)) for a, b in zip(*links, strict=True))
        assert shared >= 0.95 * max(sum(map(len, found)) for found in links), name
        assert abs(scores[0] - scores[1]) <= 1.0, (name, scores)
    aligner = Aligner(loaded, encoding="pair", precision="bf16")
    source, _, target, _ = aligner._side_states(aligner.encode_words(pairs[:3]), [2], None)
    assert source.dtype == target.dtype == torch.float32  # Sinkhorn and filtering never see bf16 states


@pytest.mark.parametrize(("pair", "method"), [("de-en", "ot"), ("en-fr", "argmax"), ("zh-en", "itermax")])
def test_evaluate_alignment_on_the_bundled_gold(tiny_model, tmp_path, pair, method):
    gold_dir = SAMPLE / "word_alignment" / pair
    out = tmp_path / "out"
    args = ["evaluate", "alignment", "--model", str(tiny_model), "--gold", str(gold_dir), "--method", method]
    result = runner.invoke(app, [*args, "--layers", "all", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "alignment.json").read_text())
    assert {"pair", "method", "layer", "aer", "precision", "recall", "sweep"} <= set(report)
    assert (report["pair"], report["method"], report["layer"]) == (pair, method, 2)  # default: 2 of 2 layers
    assert report["protocol_version"] == PROTOCOL_VERSION  # what a reader needs to call the result current
    assert [row["layer"] for row in report["sweep"]] == [0, 1, 2]
    assert (out / "alignment_layers.png").stat().st_size > 0
    assert len((out / "alignment_layers.csv").read_text().splitlines()) == 4
    # The reported numbers are the AER of the aligner's links against the gold, recomputed here.
    gold = read_gold(gold_dir)
    for row in report["sweep"]:
        links = Aligner(load_model(tiny_model), encoding=default_encoding(method)).align(
            list(zip(gold.source, gold.target, strict=True)), method, row["layer"], gold.languages
        )
        score = alignment_error_rate(links, gold.sure, gold.possible)
        assert row["aer"] == round(score.aer, 2) and row["recall"] == round(score.recall, 2)
    assert 0 < report["aer"] < 100


def test_a_sentence_aligned_to_itself_gives_the_identity_and_zero_aer(tiny_model, tmp_path, encoding="separate"):
    # Identical inputs give identical hidden states at every layer (`separate`: each side its own row), so
    # argmax must link each token to its copy: AER 0 at every layer. (`pair` runs positions on across the pair,
    # so the copy's states differ: no such identity there, by design.)
    from polyalign.evaluate.alignment import evaluate_alignment

    lines = (SAMPLE / "word_alignment" / "de-en" / "src.txt").read_text(encoding="utf-8").splitlines()[:12]
    folder = tmp_path / "de-de"
    folder.mkdir()
    (folder / "src.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "tgt.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    identity = [" ".join(f"{i}-{i}" for i in range(len(line.split()))) for line in lines]
    (folder / "gold.txt").write_text("\n".join(identity) + "\n", encoding="utf-8")
    result = evaluate_alignment(load_model(tiny_model), folder, "argmax", sweep=True, encoding=encoding)
    assert [row["aer"] for row in result.sweep] == [0.0, 0.0, 0.0]


def test_align_cli_streams_pharaoh_lines(tiny_model, tmp_path):
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("Der Hund schläft .\nJa\n\nDas ist ein ☃ Test .\nEin zweiter Satz , bitte .\n", encoding="utf-8")
    tgt.write_text("The dog sleeps .\nYes\nEmpty source\nThis is a test .\nA second sentence , please .\n")
    args = ["align", "--model", str(tiny_model), "--src", str(src), "--tgt", str(tgt), "--src-lang", "de"]
    result = runner.invoke(app, [*args, "--tgt-lang", "en", "--chunk", "2", "--method", "itermax", "--layer", "1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 5 and all(PHARAOH.match(line) for line in lines)
    assert lines[2] == ""  # an empty sentence has no links, and the line is kept
    sides = zip(src.read_text().splitlines(), tgt.read_text().splitlines(), strict=True)
    pairs = [(s.split(), t.split()) for s, t in sides]
    for line, (s, t) in zip(lines, pairs, strict=True):
        for link in line.split():
            i, j = map(int, link.split("-"))
            assert i < len(s) and j < len(t)
    expected = Aligner(load_model(tiny_model)).align(pairs, "itermax", 1, ("de", "en"))
    assert lines == [" ".join(f"{i}-{j}" for i, j in links) for links in expected]  # chunking changes nothing

    tgt.write_text("one\ntwo\n")
    result = runner.invoke(app, args)
    assert isinstance(result.exception, DataError)
    assert re.search(r"src\.txt has 5 lines but .*tgt\.txt has 2", str(result.exception))
