"""The aligner's CPU speed against eflomal, as the e5 study and bench/perf/aligner_speed.py measure it: `polyalign
align` and eflomal (training on the same pairs included, both directions, grow-diag-final-and) on the same N
tokenised en-de pairs of ../shared/data/train/parallel, each a whole command in its own process, start-up included,
interleaved round by round so other load falls on both alike; median pairs/s over the rounds; and what the machine
allows (`aligner_bound`). The Tatoeba, prepare and pretrain speeds it measured before are the retired throughput
page's section (bench/results/throughput.md; their code at commit 1936717)."""

from __future__ import annotations

import gzip
import itertools
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"


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
