"""Readers no input can crash: every reader a user's file reaches, fed valid files mutated by hypothesis.

Each target starts from valid files (a recipe, corpora and `|||` pair files, a gold alignment folder, Tatoeba and
BUCC files, a model folder's config.json, its tokenizer files and alignment.json, fit-aligner's request) and reads
them after a few mutations drawn by hypothesis: bytes flipped, inserted, deleted or repeated, the file truncated or
saved in another encoding, a number made huge, negative or not a number, a JSON/YAML value of the wrong type, a key
dropped or added. A reader passes an input when it succeeds or answers the project's one line (a DataError, or an
exception the CLI turns into one line and exit code 2); anything else is a traceback. Two targets run whole commands
(`align --out`, `prepare --out`) and check that nothing is written outside the output and no input changes.

    flock /tmp/polyalign-cpu.lock python -m bench.run fuzz -- --examples 850

writes bench/results/fuzz.json and fuzz.md. The suite runs the same targets for a few examples each
(tests/test_fuzz_readers.py).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.reporting import page_text, table
from polyalign.io import DataError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "polyalign" / "sample_data"
RESULTS = ROOT / "bench" / "results"


def one_line_errors() -> tuple[type[BaseException], ...]:
    """What the CLI (polyalign/cli/__init__.py `main` and `_guarded`) answers with one line and exit code 2."""
    from safetensors import SafetensorError
    from typer._click import exceptions as click_errors

    return (DataError, OSError, UnicodeDecodeError, FloatingPointError, SafetensorError, EOFError,
            click_errors.ClickException)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# Mutations of a valid file

WRONG_VALUES = [None, [], {}, "", "x", -1, 0, 10**30, -(10**30), 1.5, 1e309, True, [1, [2, [3]]], {"a": {"b": 1}},
                "9" * 400, "\x00", "ü" * 3, [None]]  # fmt: skip
HUGE_NUMBERS = ["9" * 40, "-1", "0", "-0", "1e309", "-1e309", "nan", ".inf", "1e-400", "4294967296", "2.5", "0x10"]
INSERTS = [b"\x00", b"\xff\xfe", b"\n", b"\r\n", b"\t", b" ||| ", b"|||", b"-", b"?", b"\xc3", b"\xe2\x80\xa8",
           b"\n\n\n", b"{", b"}", b"[", b":", b"- ", b"\x1b[31m", "ü".encode(), b"99999999999999999999"]  # fmt: skip
ENCODINGS = ["utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252", "utf-8-sig", "gzip"]


def byte_edit(data: st.DataObject, raw: bytes) -> bytes:
    """One byte-level edit: flip, insert, delete, repeat or truncate."""
    kind = data.draw(st.sampled_from(["flip", "insert", "delete", "repeat", "truncate"]))
    n = len(raw)
    at = data.draw(st.integers(0, max(n - 1, 0)))
    if kind == "flip" and n:
        return raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1 :]
    if kind == "insert":
        chunk = data.draw(st.sampled_from(INSERTS) | st.binary(min_size=1, max_size=8))
        return raw[:at] + chunk + raw[at:]
    if kind == "delete" and n:
        return raw[:at] + raw[at + data.draw(st.integers(1, max(1, min(64, n - at)))) :]
    if kind == "repeat" and n:
        end = min(n, at + data.draw(st.integers(1, 200)))
        return raw[:end] + raw[at:end] * data.draw(st.integers(1, 50)) + raw[end:]
    return raw[: data.draw(st.integers(0, n))]


def reencode(data: st.DataObject, raw: bytes) -> bytes:
    """The text saved in another encoding (or gzipped under a plain name)."""
    encoding = data.draw(st.sampled_from(ENCODINGS))
    if encoding == "gzip":
        return gzip.compress(raw, mtime=0)
    return raw.decode("utf-8", "replace").encode(encoding, "replace")


def number_edit(data: st.DataObject, raw: bytes) -> bytes:
    """A number in the file made huge, negative, fractional or not a number."""
    text = raw.decode("utf-8", "replace")
    numbers = list(re.finditer(r"-?\d+(\.\d+)?(e-?\d+)?", text))
    if not numbers:
        return raw
    m = numbers[data.draw(st.integers(0, len(numbers) - 1))]
    return (text[: m.start()] + data.draw(st.sampled_from(HUGE_NUMBERS)) + text[m.end() :]).encode()


def _paths(tree, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _paths(v, (*prefix, i))
    return out


def structure_edit(data: st.DataObject, raw: bytes, kind: str) -> bytes:
    """A JSON or YAML value replaced by one of the wrong type, a key dropped, or an unknown key added."""
    try:
        tree = json.loads(raw) if kind == "json" else yaml.safe_load(raw)
    except Exception:
        return raw
    paths = _paths(tree)
    path = paths[data.draw(st.integers(0, len(paths) - 1))]
    action = data.draw(st.sampled_from(["replace", "drop", "add"]))
    value = data.draw(st.sampled_from(WRONG_VALUES))
    if not path:
        tree = value
    else:
        parent = tree
        for key in path[:-1]:
            parent = parent[key]
        if action == "drop":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[data.draw(st.sampled_from(["extra", "layer", "encoder", "kind", "name", "1"]))] = value
        else:
            parent[path[-1]] = value
    try:
        return (json.dumps(tree) if kind == "json" else yaml.safe_dump(tree, allow_unicode=True)).encode()
    except (ValueError, TypeError):
        return raw


def mutate(data: st.DataObject, raw: bytes, kind: str) -> bytes:
    """One to three mutations of a valid file's bytes; `kind` (text, json, yaml, binary) adds structural edits."""
    families = ["bytes", "bytes", "truncate", "encoding", "number"] + (
        ["structure"] * 3 if kind in ("json", "yaml") else []
    )
    for _ in range(data.draw(st.integers(1, 3))):
        family = data.draw(st.sampled_from(families))
        if family == "bytes":
            raw = byte_edit(data, raw)
        elif family == "truncate":
            raw = raw[: data.draw(st.integers(0, len(raw)))]
        elif family == "encoding" and kind != "binary":
            raw = reencode(data, raw)
        elif family == "number" and kind != "binary":
            raw = number_edit(data, raw)
        elif family == "structure":
            raw = structure_edit(data, raw, kind)
    return raw


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


# ---------------------------------------------------------------------------------------------------------
# One example


@dataclass
class Tally:
    inputs: int = 0
    succeeded: int = 0
    one_line: int = 0
    tracebacks: int = 0
    """Inputs that ended in another exception (or a one-line error of several lines)."""
    written_outside: int = 0
    """Inputs after which a file outside the output appeared, changed or went."""
    problems: list[str] = field(default_factory=list)
    """The distinct problems, as found (exception, place, message)."""


def listing(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def check_one(target: Target, seeds: Path, work: Path, data: st.DataObject, tally: Tally) -> str | None:
    """Mutate the target's files in a fresh copy of the seeds, read them; a traceback or a file written outside the
    output is recorded (and returned); a DataError or another one-line answer is counted."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(seeds, work / "in")
    mutated = data.draw(st.lists(st.sampled_from(sorted(target.files)), min_size=1, max_size=2, unique=True))
    for name in mutated:
        path = work / "in" / name
        path.write_bytes(mutate(data, path.read_bytes(), target.files[name]))
    before = listing(work)
    tally.inputs += 1
    problem = None
    cwd = os.getcwd()
    os.chdir(work)  # a reader that writes to the working folder writes here, where it is seen
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the readers' notes (an empty pair, a skipped line)
            target.read(work / "in")
        tally.succeeded += 1
    except one_line_errors() as err:
        if "\n" in str(err).strip():
            problem = f"{target.name}: a {type(err).__name__} of several lines: {str(err)[:300]!r}"
        tally.one_line += 1
    except Exception as err:  # anything else reaches the user as a traceback
        frames = traceback.extract_tb(err.__traceback__)
        where = next((f"{f.filename.split('/polyalign/')[-1]}:{f.lineno}" for f in reversed(frames)
                      if "/polyalign/" in f.filename and "bench" not in f.filename), "?")  # fmt: skip
        problem = f"{target.name}: {type(err).__name__} at {where}: {str(err)[:200]}"
    finally:
        os.chdir(cwd)
    after = listing(work)
    allowed = "in/out" if target.output else "\0"
    outside = [p for p in after.keys() ^ before.keys() if not p.startswith(allowed)]
    outside += [p for p in before if p in after and after[p] != before[p]]  # an input changed
    if outside:
        tally.written_outside += 1
        problem = problem or f"{target.name}: wrote outside its output: {sorted(outside)[:3]}"
    elif problem is not None:
        tally.tracebacks += 1
    if problem is not None and problem not in tally.problems:
        tally.problems.append(problem)
    return problem


def run_target(target: Target, seeds: Path, examples: int, seed: int = 0) -> Tally:
    """`examples` mutated inputs of one target (hypothesis, seeded: the same inputs on every run)."""
    tally = Tally()
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-{target.name}-"))

    @settings(max_examples=examples, deadline=None, database=None, derandomize=False, phases=["generate"],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.data())
    def explore(data):
        check_one(target, seeds, work / "case", data, tally)

    from hypothesis import seed as hypothesis_seed

    hypothesis_seed(seed)(explore)()
    shutil.rmtree(work, ignore_errors=True)
    return tally


# ---------------------------------------------------------------------------------------------------------
# The bench


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


FIXES = [  # what the fuzzer found on its first runs (60-400 inputs per reader) and how each reader was fixed
    "corpus: a damaged `.gz` corpus (cut, a flipped byte, plain text under a .gz name) ended in zlib.error, "
    "BadGzipFile or EOFError without the file's name -> io.GzipText: one line naming the file",
    'model-config: config.json encoder values of the wrong type (`hidden_size: "16"`, a string compared with an '
    "int) were TypeErrors/ValueErrors from model/encoder.py -> checkpoint.read_model_config: one line naming "
    "config.json",
    "model-config: a huge size (`vocab_size: 10**12`, a width of 2**32) tried to allocate terabytes (RuntimeError "
    "from the allocator) -> checkpoint.check_weight_shapes builds the model on the meta device and compares its "
    "shapes with the weights file's header before allocating",
    "model-config: config.json or its encoder not an object (a list, a number, true) was an AttributeError in "
    "align/reading.py model_depth and checkpoint.is_polyalign_folder -> type checks, one line",
    "model-config (second run, 850 inputs): a table the weights file lacks made huge (`num_languages: 2**32`) "
    "passed the shape check and reached the allocator; a fractional or out-of-range `pad_token_id` was an IndexError "
    "or AssertionError from torch -> the meta-device model's parameter count is checked against the file's, and "
    "every construction error is one line naming config.json",
    "model-config (third run): one more size reached the allocator (a 2**32-row table whose name the weights file "
    "holds under another); the real construction's allocation failure is one line naming config.json",
    "fit-request (second run): `flags.softmax_threshold: [1]` was a TypeError in align/reading.py check_flags -> "
    "the threshold's type is checked (also for alignment.json and the Python Aligner)",
    "tokenizer: a damaged sentencepiece.model was sentencepiece's RuntimeError (`could not parse ModelProto`) -> "
    "one line naming the file; a model of special pieces only looped past the end -> one line",
    "tokenizer: polyalign_tokenizer.json not an object, `file` not a name, an unknown `kind` were AttributeError or "
    "TypeError -> one line each; a Hugging Face tokenizer's multi-line error is joined into one line",
    "alignment.json: `layer: true` was read as layer 1 -> refused (booleans are not layers)",
    "fit-request: `steps: 1e309` was an OverflowError; out-of-range steps, lr, weight, languages were accepted -> "
    "one line (`damaged ...; start a new fit`)",
]


def write_page(result: dict, page: Path) -> Path:
    """The fuzz page from its JSON."""
    total = result["total"]
    rows = [
        [name, f"{t['inputs']:,}", f"{t['succeeded']:,}", f"{t['one_line']:,}", t["tracebacks"], t["written_outside"]]
        for name, t in result["targets"].items()
    ]
    rows.append(
        ["**all**", f"**{total['inputs']:,}**", f"{total['succeeded']:,}", f"{total['one_line']:,}",
         f"**{total['tracebacks']}**", f"**{total['written_outside']}**"]
    )  # fmt: skip
    left = [f"- `{p}`" for t in result["targets"].values() for p in t["problems"]]
    lines = [
        "# Readers no input can crash: fuzzing every reader a user's file reaches",
        "",
        "Each reader starts from valid files and reads them after one to three mutations drawn by hypothesis (bytes "
        "flipped, inserted, deleted, repeated; the file truncated or saved as UTF-16/32, Latin-1, cp1252, UTF-8 with a "
        "BOM or gzip; a number made huge, negative or NaN; a JSON/YAML value of the wrong type, a key dropped or "
        "added). An input passes when the reader succeeds or answers one line (a `DataError`, or an exception the CLI "
        "turns into one line and exit code 2). `align-command` and `prepare-command` run the whole command into an "
        "output folder and check that nothing is written outside it and no input changes.",
        "",
        f"Command: `{result['command']}` at commit `{result['commit']}`; {result['seconds']:.0f} s, hypothesis "
        f"{result['hypothesis']}, seed {result['seed']}.",
        "",
        table(["reader", "inputs", "read", "one-line error", "tracebacks", "written outside"], rows),
        "",
        "## What it found, and the fixes",
        "",
        *([f"- {fix}" for fix in result["fixes"]] or ["- none"]),
        "",
        "## Left",
        "",
        *(left or ["- nothing: every input read or answered with one line; nothing written outside an output"]),
    ]
    page.write_text(page_text(lines) + "\n", encoding="utf-8")
    return page


def main(argv: list[str] | None = None) -> dict:
    import hypothesis

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=850, help="Inputs per reader.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="Comma list of targets (default: all).")
    parser.add_argument("--out", type=Path, default=RESULTS / "fuzz", help="Writes OUT.json and OUT.md.")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    names = args.only.split(",") if args.only else list(TARGETS)
    root = Path(tempfile.mkdtemp(prefix="fuzz-seeds-"))
    seeds = build_seeds(root)
    targets = {}
    for name in names:
        started = time.perf_counter()
        tally = run_target(TARGETS[name], seeds, args.examples, args.seed)
        targets[name] = vars(tally) | {"seconds": round(time.perf_counter() - started, 1)}
        print(f"{name}: {tally.inputs} inputs, {tally.one_line} one-line errors, {tally.tracebacks} tracebacks, "
              f"{tally.written_outside} written outside ({targets[name]['seconds']} s)", file=sys.stderr)  # fmt: skip
        for problem in tally.problems:
            print(f"  {problem}", file=sys.stderr)
    shutil.rmtree(root, ignore_errors=True)
    total = {
        "inputs": sum(t["inputs"] for t in targets.values()),
        "succeeded": sum(t["succeeded"] for t in targets.values()),
        "one_line": sum(t["one_line"] for t in targets.values()),
        "tracebacks": sum(t["tracebacks"] for t in targets.values()),
        "written_outside": sum(t["written_outside"] for t in targets.values()),
    }
    result = {
        "command": "python -m bench.run fuzz -- " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": commit(),
        "hypothesis": hypothesis.__version__,
        "seed": args.seed,
        "examples_per_reader": args.examples,
        "seconds": time.perf_counter() - t0,
        "targets": targets,
        "total": total,
        "fixes": FIXES,
    }
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    write_page(result, args.out.with_suffix(".md"))
    return result
