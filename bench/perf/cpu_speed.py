"""CPU speed of the commands users wait for: `polyalign align` against eflomal, Tatoeba-14 with a layer sweep,
and `prepare` (MB/s and peak memory at 1x and 10x corpus size).

Every measurement is a whole command in its own process, start-up included, timed by wall clock:
- aligner: `polyalign align` (ot, pair encoding, default layer, bf16) and eflomal (training on the same pairs
  included, both directions, grow-diag-final-and; as bench/probes/eflomal_baseline.py runs it) on the same N
  tokenised en-de pairs of ../shared/data/train/parallel, interleaved round by round so other load falls on both alike;
  median pairs/s over the rounds.
- tatoeba: `polyalign evaluate tatoeba --langs tatoeba14 --layers all`, seconds and peak memory.
- prepare: `polyalign prepare` on three mono files and one parallel pair (1x), and on the same files repeated
  10 times (10x); MB/s of input text and peak memory (largest single process: workers are processes).
- pretrain: `polyalign pretrain mlm` (6 x 384) for a few steps on a prepared folder, with the code of a
  `--before` commit and with this checkout, interleaved round by round; tokens/s and model GFLOP/s from the
  runs' metrics.jsonl, the first log window (start-up, warm-up) left out.
Writes --out/cpu_speed.json; bench/perf/throughput.py's report adds it as a section (`cpu_speed_section`).

Usage (2 CPU cores, idle machine; about 15 minutes):
    flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.perf.cpu_speed
Quick check that it runs (not a measurement):
    .venv/bin/python -m bench.perf.cpu_speed --pairs 200 --rounds 1 --only aligner --out /tmp/cpu_speed
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.reporting import Block, page_text, table

ROOT = Path(__file__).resolve().parents[2]
NOT_RECORDED = "commit not recorded by that run"

SHARED = ROOT.parent / "shared"
PARTS = ("aligner", "tatoeba", "prepare", "pretrain")
PREPARE_MONO = ("de", "en", "fr")
PREPARE_PAIR = "en-de"


def run(command: list[str], stdout=subprocess.DEVNULL, code: Path = ROOT) -> tuple[float, float]:
    """Run a command to completion with the polyalign package of `code`; returns (wall seconds, peak RSS in MB
    of the largest process in its tree)."""
    t0 = time.perf_counter()
    process = subprocess.Popen(command, stdout=stdout, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(code)})
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(command)}")
    return seconds, usage.ru_maxrss / 1024  # Linux: kilobytes; includes waited-for children


def polyalign(*args: str) -> list[str]:
    return [sys.executable, "-m", "polyalign.cli", *args]


# ---------------------------------------------------------------------------------------------------------
# aligner vs eflomal


def write_pairs(folder: Path, pairs: int) -> tuple[Path, Path]:
    """The first `pairs` en-de training pairs, tokenised as bench/probes/eflomal_baseline.py tokenises bitext for
    eflomal."""
    from polyalign.align.eflomal import tokenize_bitext

    paths = []
    for lang in ("de", "en"):
        with gzip.open(SHARED / "data" / "train" / "parallel" / f"en-de.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = [line.strip() for line in itertools.islice(f, pairs)]
        paths.append(folder / f"pairs.{lang}")
        paths[-1].write_text("\n".join(tokenize_bitext(lines, lang, [])) + "\n", encoding="utf-8")
    return paths[0], paths[1]


def eflomal_command(src: Path, tgt: Path, out: Path) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--eflomal", str(src), str(tgt), str(out)]


def eflomal_files(src: Path, tgt: Path, out: Path) -> None:
    """What the eflomal process runs: align the two files (eflomal trains on them), Pharaoh lines to `out`."""
    from polyalign.align.eflomal import eflomal_align
    from polyalign.align.words import pharaoh

    read = lambda p: [line.split() for line in p.read_text(encoding="utf-8").splitlines()]  # noqa: E731
    links = eflomal_align(list(zip(read(src), read(tgt), strict=True)), [])
    out.write_text("".join(pharaoh(found) + "\n" for found in links), encoding="utf-8")


def measure_aligner(model: Path, pairs: int, rounds: int, scratch: Path, options: tuple[str, ...] = ()) -> dict:
    """`polyalign align` (with `options`, e.g. another method) against eflomal on the same pairs, interleaved."""
    src, tgt = write_pairs(scratch, pairs)
    commands = {
        "polyalign": polyalign("align", "--model", str(model), "--src", str(src), "--tgt", str(tgt), "--no-progress")
        + list(options),
        "eflomal": eflomal_command(src, tgt, scratch / "eflomal.links"),
    }
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    encoding = options[options.index("--encoding") + 1] if "--encoding" in options else "pair"
    layer = int(options[options.index("--layer") + 1]) if "--layer" in options else None
    bound = aligner_bound(model, src, tgt, rounds, encoding, layer)
    for r in range(rounds):
        for name in list(commands)[r % 2 :] + list(commands)[: r % 2]:  # alternate who goes first
            with open(scratch / f"{name}.stdout", "wb") as out:
                seconds[name].append(run(commands[name], stdout=out)[0])
            print(f"aligner round {r + 1}: {name} {pairs / seconds[name][-1]:.0f} pairs/s", flush=True)
    result = {
        name: {"seconds": s, "median_seconds": statistics.median(s), "pairs_per_s": pairs / statistics.median(s)}
        for name, s in seconds.items()
    }
    command = " ".join(commands["polyalign"])
    return {"model": str(model), "pairs": pairs, "rounds": rounds, "command": command, **result, "bound": bound}


def linear_rate(rows: int, inputs: int, outputs: int, repeats: int = 10) -> float:
    """Best bf16 GFLOP/s of F.linear on a (rows, inputs) x (inputs, outputs) product on this machine."""
    import torch
    import torch.nn.functional as F

    x, w, b = torch.randn(rows, inputs), torch.randn(outputs, inputs), torch.randn(outputs)
    x, w, b = (t.to(torch.bfloat16) for t in (x, w, b))
    F.linear(x, w, b)  # warm-up: oneDNN picks its kernel on the first call
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        F.linear(x, w, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * rows * inputs * outputs / best / 1e9


def aligner_bound(
    model: Path, src: Path, tgt: Path, rounds: int, encoding: str = "pair", layer: int | None = None
) -> dict:
    """The least time `polyalign align` could take on these pairs on this machine with this model: starting
    Python with torch imported, plus the encoder's linear layers up to the aligner's default layer run at the
    best bf16 rate F.linear reaches here at the model's shapes (8,192-token batches, as the aligner's). The
    rest of the work (attention, GELU, LayerNorm, Sinkhorn, tokenisation, I/O) is left out, so the real time
    lies above the bound: a goal above `max_pairs_per_s` cannot be met on this machine by any schedule of the
    same model's computation."""
    from polyalign.align.aer import read_word_pairs
    from polyalign.align.aligner import Aligner
    from polyalign.checkpoint import load_model

    aligner = Aligner(load_model(model), encoding=encoding)
    encoded = aligner.encode_words([(s, t) for _, s, t in read_word_pairs(src, tgt)])
    special = 3 if encoding == "pair" else 4  # <s> x </s> y </s>, or <s> x </s> and <s> y </s>
    tokens = sum(len(p.source_ids) + len(p.target_ids) + special for p in encoded)
    c, layers = aligner.model.config, layer or aligner.default_layer
    shapes = {"qkv": (c.hidden_size, 3 * c.hidden_size), "output": (c.hidden_size, c.hidden_size)}
    shapes |= {"ffn_up": (c.hidden_size, c.ffn_size), "ffn_down": (c.ffn_size, c.hidden_size)}
    rates = {name: linear_rate(8192, i, o) for name, (i, o) in shapes.items()}
    by_shape = {n: layers * 2 * tokens * i * o / (rates[n] * 1e9) for n, (i, o) in shapes.items()}
    linear_seconds = sum(by_shape.values())
    start = statistics.median(run([sys.executable, "-c", "import torch"])[0] for _ in range(rounds))
    bound = start + linear_seconds
    return {
        "tokens": tokens,
        "layers": layers,
        "bf16_linear_gflops": rates,
        "linear_seconds": linear_seconds,
        "linear_seconds_by_shape": by_shape,
        "python_torch_start_seconds": start,
        "bound_seconds": bound,
        "max_pairs_per_s": len(encoded) / bound,
    }


# ---------------------------------------------------------------------------------------------------------
# Tatoeba-14


def measure_tatoeba(model: Path, scratch: Path) -> dict:
    out = scratch / "tatoeba"
    args = ["evaluate", "tatoeba", "--model", str(model), "--data", str(SHARED / "data" / "eval" / "tatoeba")]
    command = polyalign(*args, "--langs", "tatoeba14", "--layers", "all", "--out", str(out), "--no-progress")
    seconds, peak = run(command)
    report = json.loads((out / "tatoeba.json").read_text())
    return {
        "model": str(model),
        "seconds": seconds,
        "peak_rss_mb": peak,
        "sentences": 2 * sum(report["sizes"].values()),
        "layers": len(report["sweep"]),
        "average_acc_at_reported_layer": report["reported"]["average"]["both"],
    }


# ---------------------------------------------------------------------------------------------------------
# prepare


def write_corpus(folder: Path, copies: int) -> int:
    """Three mono files and one parallel pair from the shared training data, each repeated `copies` times
    (plain text); returns the bytes written."""
    sources = [
        (SHARED / "data" / "train" / "mono" / f"{lang}.txt.gz", folder / "mono" / f"{lang}.txt")
        for lang in PREPARE_MONO
    ]
    sources += [
        (
            SHARED / "data" / "train" / "parallel" / f"{PREPARE_PAIR}.{lang}.gz",
            folder / "parallel" / f"{PREPARE_PAIR}.{lang}",
        )
        for lang in PREPARE_PAIR.split("-")
    ]
    total = 0
    for source, target in sources:
        target.parent.mkdir(parents=True, exist_ok=True)
        text = gzip.decompress(source.read_bytes())
        text += b"" if text.endswith(b"\n") else b"\n"
        with open(target, "wb") as f:
            for _ in range(copies):
                f.write(text)
        total += copies * len(text)
    return total


def measure_prepare(scratch: Path, scales: list[int], workers: list[int], sample_lines: int) -> list[dict]:
    rows = []
    for copies in scales:
        corpus = scratch / f"corpus{copies}x"
        size = write_corpus(corpus, copies)
        for w in workers:
            out = scratch / f"prepared{copies}x-w{w}"
            args = ["prepare", "--mono", str(corpus / "mono"), "--parallel", str(corpus / "parallel")]
            args += ["--out", str(out), "--vocab-size", "8000", "--tokenizer-sample-lines", str(sample_lines)]
            seconds, peak = run(polyalign(*args, "--workers", str(w), "--no-progress"))
            rows.append(
                {
                    "copies": copies,
                    "workers": w,
                    "mb": size / 1e6,
                    "seconds": seconds,
                    "mb_per_s": size / 1e6 / seconds,
                    "peak_rss_mb": peak,
                }
            )
            print(f"prepare {copies}x, {w} workers: {rows[-1]['mb_per_s']:.2f} MB/s, peak {peak:.0f} MB", flush=True)
            shutil.rmtree(out)
        shutil.rmtree(corpus)
    return rows


# ---------------------------------------------------------------------------------------------------------
# pre-training loop, before and after


def steady_rates(metrics: Path) -> dict:
    """tokens/s and model FLOP/s over every log window after the first, from cumulative counters."""
    from bench.reporting import records

    rows = records(metrics)
    first, last = rows[0], rows[-1]
    seconds = last["seconds"] - first["seconds"]
    return {
        "tokens_per_s": (last["tokens"] - first["tokens"]) / seconds,
        "flops_per_s": (last["flops"] - first["flops"]) / seconds,
    }


def measure_pretrain(before: str, prepared: Path, steps: int, rounds: int, scratch: Path) -> dict:
    old = scratch / "before-code"
    old.mkdir()
    archive = subprocess.run(["git", "archive", before, "polyalign"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    codes = {f"before ({before})": old, "after (this checkout)": ROOT}
    rates: dict[str, list[dict]] = {name: [] for name in codes}
    for r in range(rounds):
        for name in list(codes)[r % 2 :] + list(codes)[: r % 2]:  # alternate who goes first
            out = scratch / f"pretrain-{r}-{len(rates[name])}-{'before' if codes[name] is old else 'after'}"
            args = ["pretrain", "mlm", "--data", str(prepared), "--run-dir", str(out), "--no-progress"]
            sets = [f"trainer.max_steps={steps}", "trainer.log_every=5", f"trainer.save_every={steps}"]
            run(polyalign(*args, *(x for s in sets for x in ("--set", s))), code=codes[name])
            rates[name].append(steady_rates(out / "metrics.jsonl"))
            shutil.rmtree(out)
            print(f"pretrain round {r + 1}: {name} {rates[name][-1]['tokens_per_s']:.0f} tokens/s", flush=True)
    return {
        "prepared": str(prepared),
        "steps": steps,
        "rounds": rounds,
        **{
            name: {
                "tokens_per_s": statistics.median(x["tokens_per_s"] for x in rs),
                "flops_per_s": statistics.median(x["flops_per_s"] for x in rs),
                "rounds": rs,
            }
            for name, rs in rates.items()
        },
    }


# ---------------------------------------------------------------------------------------------------------
# Report section (bench/perf/throughput.py adds it to throughput.md)


def cpu_speed_section(path: Path) -> list[str | Block]:
    """The page's lines and tables for cpu_speed.json, or none when it was not measured."""
    if not Path(path).is_file():
        return []
    r = json.loads(Path(path).read_text())
    lines = [
        "## CPU speed of alignment, evaluation and prepare (`python -m bench.perf.cpu_speed`)",
        "",
        f"Measured {r['date']} on {r['machine']}; 1-minute load average {r['load_average_1min'][0]:.1f} before, "
        f"{r['load_average_1min'][1]:.1f} after. Command: `{r['command']}` (code: {r.get('code', NOT_RECORDED)}). "
        "Whole commands in their own processes, start-up included, wall clock.",
        "",
    ]
    for part, stamp in r.get("measured", {}).items():
        if stamp["date"] != r["date"]:
            lines += [
                f"The {part} part was measured earlier: {stamp['date']}, command `{stamp['command']}` (code: "
                f"{stamp.get('code', NOT_RECORDED)}), 1-minute load "
                f"average {stamp['load_average_1min'][0]:.1f} before, {stamp['load_average_1min'][-1]:.1f} after.",
                "",
            ]
    if a := r.get("aligner"):
        lines += [
            f"Aligner: {a['pairs']} tokenised en-de training pairs, {a['rounds']} interleaved rounds, median; "
            f"polyalign = `polyalign align` with `{Path(a['model']).name}` (ot, pair encoding, default layer, bf16); "
            "eflomal = training on the same pairs and aligning both directions, grow-diag-final-and.",
            "",
            table(
                ["aligner", "median s", "pairs/s", "goal"],
                [
                    [name, f"{a[name]['median_seconds']:.1f}", f"{a[name]['pairs_per_s']:.0f}", goal]
                    for name, goal in (("polyalign", ">= 500 and > eflomal"), ("eflomal", ""))
                ],
                align="lrrr",
            ),
        ]
        if b := a.get("bound"):
            rates = ", ".join(f"{k} {v:.0f}" for k, v in b["bf16_linear_gflops"].items())
            lines += [
                f"What this machine allows (`aligner_bound`): the pairs are {b['tokens']:,} tokens in the pair "
                f"encoding; the encoder's linear layers up to layer {b['layers']} at the best bf16 rate F.linear "
                f"reaches here at the model's shapes (GFLOP/s: {rates}) take {b['linear_seconds']:.2f} s, and "
                f"starting Python with torch imported {b['python_torch_start_seconds']:.2f} s: at least "
                f"{b['bound_seconds']:.2f} s before attention, GELU, LayerNorm, Sinkhorn, tokenisation and I/O, so "
                f"at most {b['max_pairs_per_s']:.0f} pairs/s for any implementation of this model's computation "
                "on this machine.",
                "",
            ]
    if t := r.get("tatoeba"):
        lines += [
            f"Tatoeba-14 with a layer sweep (`{Path(t['model']).name}`, {t['sentences']} sentences, {t['layers']} "
            f"layers): {t['seconds']:.1f} s (goal < 30 s), peak memory {t['peak_rss_mb']:.0f} MB.",
            "",
        ]
    if t := r.get("pretrain"):
        names = [k for k in t if k.startswith(("before", "after"))]
        lines += [
            f"Pre-training loop: `polyalign pretrain mlm` (6 layers x 384, bf16 autocast) for {t['steps']} steps on "
            f"`{t['prepared']}`, {t['rounds']} interleaved rounds, median; rates over the log windows after the "
            "first.",
            "",
            table(
                ["code", "tokens/s", "model GFLOP/s"],
                [[n, f"{t[n]['tokens_per_s']:.0f}", f"{t[n]['flops_per_s'] / 1e9:.0f}"] for n in names],
                align="lrr",
            ),
        ]
    if p := r.get("prepare"):
        cells = "{copies}x|{workers}|{mb:.0f}|{seconds:.1f}|{mb_per_s:.2f}|{peak_rss_mb:.0f}"
        rows = [cells.format(**{**row, "workers": row["workers"] or "all"}).split("|") for row in p]
        lines += [
            f"prepare: mono {', '.join(PREPARE_MONO)} and parallel {PREPARE_PAIR} from ../shared/data/train as plain "
            f"text (1x), and every file repeated 10 times (10x); vocabulary 8000 trained on "
            f"{r['prepare_sample_lines']:,} sampled lines. Peak memory = the largest single process.",
            "",
            table(["corpus", "workers", "MB", "s", "MB/s", "peak memory (MB)"], rows, align="lrrrrr"),
        ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=SHARED / "models" / "small-base")
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    ap.add_argument("--scales", default="1,10", help="prepare corpus sizes (copies of the 1x corpus)")
    ap.add_argument("--workers", default="1,2", help="prepare --workers values measured at the smallest scale")
    ap.add_argument("--sample-lines", type=int, default=200_000, help="prepare --tokenizer-sample-lines")
    ap.add_argument("--before", default="c4ac8d9", help="commit whose training loop `pretrain` compares against")
    ap.add_argument("--prepared", type=Path, default=ROOT / "bench" / "work" / "prepared-all24")
    ap.add_argument("--steps", type=int, default=30, help="pretrain steps per run")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--eflomal", nargs=3, type=Path, metavar=("SRC", "TGT", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.eflomal:  # the eflomal process of the aligner comparison
        eflomal_files(*args.eflomal)
        return
    from bench.reporting import commit, machine

    parts = args.only.split(",")
    scales = [int(s) for s in args.scales.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "code": commit(),
        "machine": machine(),
        "command": "python -m bench.perf.cpu_speed " + " ".join(sys.argv[1:]),
        "load_average_1min": [os.getloadavg()[0]],
        "prepare_sample_lines": args.sample_lines,
    }
    with tempfile.TemporaryDirectory(prefix="cpu_speed") as tmp:
        scratch = Path(tmp)
        if "aligner" in parts:
            # ot (pair encoding) by name: the protocol of this page, no longer `align`'s default
            result["aligner"] = measure_aligner(args.model, args.pairs, args.rounds, scratch, ("--method", "ot"))
        if "tatoeba" in parts:
            result["tatoeba"] = measure_tatoeba(args.model, scratch)
            print(f"tatoeba-14: {result['tatoeba']['seconds']:.1f} s", flush=True)
        if "prepare" in parts:
            # Workers are compared at the smallest scale; the larger scales run with every core.
            runs = [(scales[0], w) for w in workers] + [(s, 0) for s in scales[1:]]
            result["prepare"] = [row for s, w in runs for row in measure_prepare(scratch, [s], [w], args.sample_lines)]
        if "pretrain" in parts:
            result["pretrain"] = measure_pretrain(args.before, args.prepared, args.steps, args.rounds, scratch)
    result["load_average_1min"].append(os.getloadavg()[0])
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "cpu_speed.json"
    # Parts not measured this time stay as they were, each with the date, command and load of its own run.
    stamp = {k: result[k] for k in ("date", "code", "command", "load_average_1min")}
    earlier = json.loads(path.read_text()) if path.is_file() else {}
    measured = earlier.get("measured", {part: {k: earlier[k] for k in stamp} for part in PARTS if part in earlier})
    for part in PARTS:
        if part in result:
            measured[part] = stamp
        elif part in earlier:
            result[part] = earlier[part]
    result["measured"] = {part: measured[part] for part in PARTS if part in result}
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(page_text(cpu_speed_section(args.out / "cpu_speed.json")))


if __name__ == "__main__":
    main()
