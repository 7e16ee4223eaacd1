"""The fuzz bench's valid seed files and its targets: which files each reader mutates and how it reads them
(bench/perf/fuzz.py)."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from polyalign.io import DataError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "polyalign" / "sample_data"


# ---------------------------------------------------------------------------------------------------------
# The valid files every target starts from


def build_seeds(root: Path) -> Path:
    """A folder of valid inputs: a tiny model folder (SentencePiece tokenizer, alignment.json), corpora, pair files,
    a gold folder, Tatoeba and BUCC files, a recipe and a fit request."""
    import torch

    from polyalign.align.reading import Reading, write_reading
    from polyalign.checkpoint import save_model_folder
    from polyalign.model import EncoderConfig, MaskedLanguageModel
    from polyalign.tokenizer import train_sentencepiece

    seeds = root / "seeds"
    seeds.mkdir(parents=True)
    lines = lambda path, n: "".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:n])  # noqa: E731
    text = seeds / "tokenizer-text.txt"
    text.write_text("".join(lines(SAMPLE / "mono" / f"{lang}.txt", 200) for lang in ("de", "en", "fr")))
    tokenizer = train_sentencepiece(text, root / "spm", 300)
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=tokenizer.special.vocab_size, hidden_size=16, num_layers=2, num_heads=2,
                           ffn_size=16, max_positions=64, pad_token_id=tokenizer.special.pad)  # fmt: skip
    model = save_model_folder(seeds / "model", MaskedLanguageModel(config), tokenizer, [])
    write_reading(model, Reading("softmax", 1, 0.1, chosen_by="fuzz seed"))
    (seeds / "mono").mkdir()
    (seeds / "mono" / "de.txt").write_text(lines(SAMPLE / "mono" / "de.txt", 12))
    (seeds / "mono" / "fr.txt.gz").write_bytes(gzip.compress(lines(SAMPLE / "mono" / "fr.txt", 12).encode(), mtime=0))
    (seeds / "parallel").mkdir()
    for side in ("de", "en"):
        (seeds / "parallel" / f"en-de.{side}").write_text(lines(SAMPLE / "parallel" / f"en-de.{side}", 12))
    de, en = (lines(SAMPLE / "parallel" / f"en-de.{s}", 12).splitlines() for s in ("de", "en"))
    (seeds / "parallel" / "en-fr.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in zip(en, de, strict=True)))
    gold = SAMPLE / "word_alignment" / "de-en"
    (seeds / "de-en").mkdir()
    for name in ("src.txt", "tgt.txt", "gold.txt"):
        (seeds / "de-en" / name).write_text(lines(gold / name, 8))
    src, tgt = lines(gold / "src.txt", 8).splitlines(), lines(gold / "tgt.txt", 8).splitlines()
    (seeds / "pairs.txt").write_text("".join(f"{a} ||| {b}\n" for a, b in zip(src, tgt, strict=True)))
    (seeds / "tatoeba").mkdir()
    for side in ("deu", "eng"):
        name = f"tatoeba.deu-eng.{side}"
        (seeds / "tatoeba" / name).write_text(lines(SAMPLE / "tatoeba" / name, 10))
    (seeds / "bucc").mkdir()
    (seeds / "bucc" / "de-en.dev.de").write_text("".join(f"de-{i:06d}\t{s}\n" for i, s in enumerate(de)))
    (seeds / "bucc" / "de-en.dev.en").write_text("".join(f"en-{i:06d}\t{s}\n" for i, s in enumerate(en)))
    (seeds / "bucc" / "de-en.dev.gold").write_text("".join(f"de-{i:06d}\ten-{i:06d}\n" for i in range(0, 12, 2)))
    (seeds / "recipe.yaml").write_text(
        "model:\n  hidden_size: 32\n  num_layers: 2\n  num_heads: 4\n  ffn_size: 64\nobjectives:\n  - name: mlm\n"
        "    weight: 1.0\n  - name: tlm\n    weight: 0.5\n    config:\n      mask_prob: 0.15\ndata:\n  mono:\n"
        "    max_tokens: 512\n    max_length: 30\n  parallel:\n    max_tokens: 512\n    alpha: 0.5\n"
        "trainer:\n  max_steps: 10\n  lr: 1.0e-3\n  betas: [0.9, 0.98]\n  warmup_steps: 2\n  precision: fp32\n"
    )
    (seeds / "fit").mkdir()
    request = {"start": str(model), "source": str(seeds / "pairs.txt"), "target": None, "tokenize": False,
               "pairs": len(src), "steps": 4, "src_lang": "de", "tgt_lang": "en", "lr": 2e-5, "weight": 0.5,
               "batch_tokens": 8192, "flags": {"method": None, "layer": None, "softmax_threshold": None,
                                               "encoding": None}}  # fmt: skip
    (seeds / "fit" / "fit-request.json").write_text(json.dumps(request, indent=1))
    shutil.rmtree(root / "spm")
    return seeds


# ---------------------------------------------------------------------------------------------------------
# The targets: which files are mutated, and how they are read


def _read_corpus(folder: Path) -> None:
    from polyalign.data.prepare import check_bad_lines, check_parallel_lengths, discover_corpus, pair_rows
    from polyalign.io import LinePolicy, read_lines

    corpus = discover_corpus(folder / "mono", folder / "parallel")
    check_parallel_lengths(corpus)
    for policy in (LinePolicy(on_bad="skip"), LinePolicy(on_bad="error", max_chars=200)):
        check_bad_lines(corpus, policy)
        for files in corpus.mono.values():
            for path in files:
                list(read_lines(path, policy))
        for source in corpus.parallel:
            list(pair_rows(source, policy))


def _read_pairs(folder: Path) -> None:
    from polyalign.align.bitext import Bitext, check_bitext, read_bitext

    for tokenize in (False, True):
        bitext = Bitext(folder / "pairs.txt", tokenize=tokenize)
        check_bitext(bitext)
        list(read_bitext(bitext))


def _read_gold(folder: Path) -> None:
    from polyalign.align.aer import read_gold

    gold = read_gold(folder / "de-en")
    gold.languages  # noqa: B018 - the folder name's reading


def _read_tatoeba(folder: Path) -> None:
    from polyalign.evaluate.tatoeba import read_tatoeba, resolve_languages

    resolve_languages("de", folder / "tatoeba")
    read_tatoeba(folder / "tatoeba", "de")


def _read_bucc(folder: Path) -> None:
    from polyalign.evaluate.bucc import bucc_files, read_bucc_gold, read_bucc_sentences

    src, en, gold = bucc_files(folder / "bucc", "de-en", "dev")
    list(read_bucc_sentences(src)), list(read_bucc_sentences(en)), read_bucc_gold(gold)


def _read_recipe(folder: Path) -> None:
    from polyalign.config import load_recipe

    load_recipe(str(folder / "recipe.yaml"))


def _load_model(folder: Path) -> None:
    from polyalign.align.reading import model_depth, resolve_reading
    from polyalign.checkpoint import load_model

    model = folder / "model"
    resolve_reading(model, model_depth(model))
    loaded = load_model(model)
    loaded.tokenizer.encode_words([["ein", "Haus"], ["a", "house"]])


def _read_fit_request(folder: Path) -> None:
    from polyalign.fit_aligner import read_fit_request

    read_fit_request(folder / "fit")


def _cli(args: list[str]) -> None:
    """A command in this process: exit code 0 or 2 with one line; anything else raises (a traceback)."""
    from polyalign.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(args)
        except SystemExit as exit_:
            code = exit_.code
        else:
            code = 0
    said = err.getvalue().strip()
    if code not in (0, 2) or (code == 2 and ("Traceback" in said or said.count("error: ") != 1)):
        raise AssertionError(f"exit code {code}: {said[-400:]}")
    if code == 2:  # notes may come before the error, which is the last line (rich wraps long lines)
        raise DataError(" ".join(said[said.index("error: ") :].split()))


def _align(folder: Path) -> None:
    out = folder / "out"
    _cli(["align", "--model", str(folder / "model"), "--pairs", str(folder / "pairs.txt"), "--out",
          str(out / "links.txt"), "--output-prob", str(out / "prob.txt"), "--no-progress", "--device", "cpu",
          "--precision", "fp32"])  # fmt: skip


def _prepare(folder: Path) -> None:
    _cli(["prepare", "--mono", str(folder / "mono"), "--parallel", str(folder / "parallel"), "--tokenizer-from",
          str(folder / "model"), "--out", str(folder / "out" / "prepared"), "--workers", "1", "--bad-lines", "error",
          "--no-progress"])  # fmt: skip


@dataclass
class Target:
    name: str
    files: dict[str, str]
    """The seed files this target mutates (path in the seeds folder -> kind: text, json, yaml, binary)."""
    read: Callable[[Path], None]
    output: bool = False
    """A command with an output (folder/out): files may appear there, nowhere else."""


TARGETS = {
    t.name: t
    for t in [
        Target("recipe", {"recipe.yaml": "yaml"}, _read_recipe),
        Target(
            "corpus",
            {
                "mono/de.txt": "text",
                "mono/fr.txt.gz": "binary",
                "parallel/en-de.de": "text",
                "parallel/en-fr.tsv": "text",
            },
            _read_corpus,
        ),  # fmt: skip
        Target("pairs", {"pairs.txt": "text"}, _read_pairs),
        Target("gold", {"de-en/src.txt": "text", "de-en/tgt.txt": "text", "de-en/gold.txt": "text"}, _read_gold),
        Target(
            "tatoeba", {"tatoeba/tatoeba.deu-eng.deu": "text", "tatoeba/tatoeba.deu-eng.eng": "text"}, _read_tatoeba
        ),  # fmt: skip
        Target(
            "bucc",
            {"bucc/de-en.dev.de": "text", "bucc/de-en.dev.en": "text", "bucc/de-en.dev.gold": "text"},
            _read_bucc,
        ),  # fmt: skip
        Target("model-config", {"model/config.json": "json"}, _load_model),
        Target(
            "tokenizer",
            {"model/tokenizer/polyalign_tokenizer.json": "json", "model/tokenizer/sentencepiece.model": "binary"},
            _load_model,
        ),  # fmt: skip
        Target("alignment-json", {"model/alignment.json": "json"}, _load_model),
        Target("fit-request", {"fit/fit-request.json": "json"}, _read_fit_request),
        Target("align-command", {"pairs.txt": "text", "model/alignment.json": "json"}, _align, output=True),
        Target("prepare-command", {"mono/de.txt": "text", "parallel/en-fr.tsv": "text"}, _prepare, output=True),
    ]
}
