"""Readers no input can crash: every reader a user's file reaches, fed valid files mutated by hypothesis.

Each target starts from valid files (a recipe, corpora and `|||` pair files, a gold alignment folder, Tatoeba and
BUCC files, a model folder's config.json, its tokenizer files and alignment.json, fit-aligner's request) and reads
them after a few mutations drawn by hypothesis: bytes flipped, inserted, deleted or repeated, the file truncated or
saved in another encoding, a number made huge, negative or not a number, a JSON/YAML value of the wrong type, a key
dropped or added. A reader passes an input when it succeeds or answers the project's one line (a DataError, or an
exception the CLI turns into one line and exit code 2); anything else is a traceback. Two targets run whole commands
(`align --out`, `prepare --out`) and check that nothing is written outside the output and no input changes.

    flock /tmp/polyalign-cpu.lock python -m bench.run fuzz -- --examples 850

writes bench/results/fuzz.json and fuzz.md. What the runs found and how each reader was fixed is a record, not
code: the `fixes` of bench/results/fuzz.json, carried into every run's JSON (a fix adds its line there). The suite
runs the same targets for a few examples each (tests/test_fuzz_readers.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.page import save_page
from bench.perf.fuzz_mutations import mutate
from bench.perf.fuzz_targets import TARGETS, Target, build_seeds  # noqa: F401  (build_seeds: the suite reads it here)
from bench.reporting import commit, read_json, table
from polyalign.io import DataError

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def one_line_errors() -> tuple[type[BaseException], ...]:
    """What the CLI (polyalign/cli/__init__.py `main` and `_guarded`) answers with one line and exit code 2."""
    from safetensors import SafetensorError
    from typer._click import exceptions as click_errors

    return (DataError, OSError, UnicodeDecodeError, FloatingPointError, SafetensorError, EOFError,
            click_errors.ClickException)  # fmt: skip


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


SLOW_S = 60
"""An input a reader takes longer than this over is recorded as a problem (a size that reached the allocator took
16 GB and 8 minutes once before the model-config check counted padding rows)."""


class Slow(Exception):
    pass


def _too_slow(signum, frame):
    raise Slow(f"took over {SLOW_S} s")


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
    previous = signal.signal(signal.SIGALRM, _too_slow)
    signal.alarm(SLOW_S)
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
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
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


def page_parts(result: dict) -> list:
    """The fuzz page (bench/page.py draws it from the JSON's copy)."""
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
        f"Command: `{result['command']}` at commit {result['commit']}; {result['seconds']:.0f} s, hypothesis "
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
    return lines


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
        "fixes": read_json(RESULTS / "fuzz.json").get("fixes", []) if (RESULTS / "fuzz.json").is_file() else [],
    }
    save_page(args.out.with_suffix(".json"), result, page_parts(result))
    return result
