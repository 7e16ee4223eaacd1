"""The aligner's speed against its peers, each a whole command in its own process, start-up included:

- eflomal (training on the same pairs included, both directions) at 2,000 and 20,000 tokenised en-de pairs,
  interleaved round by round with `polyalign align` (bench/perf/cpu_speed.py's `measure_aligner`);
- SimAlign 0.4 (PyPI, argmax) on the same model exported by `polyalign export`, at 500 pairs, against `polyalign
  align` with SimAlign's setting (argmax, layer 8) on the same 500;
- the encoder's model FLOPs utilisation: the linear layers' FLOPs up to the aligned layer over polyalign's wall time,
  against the best bf16 rate F.linear reaches on this machine at the model's shapes (the matmul peak).

SimAlign is not a polyalign dependency: install it apart (`pip install --no-deps -t DIR simalign`; its own
dependencies, transformers among them, are polyalign's dev extras) and give DIR with --simalign.

    flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.perf.aligner_speed --model M --simalign DIR --out F.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.perf.cpu_speed import measure_aligner, polyalign, run, write_pairs

EFLOMAL_PAIRS = (2000, 20000)
SIMALIGN_PAIRS = 500
SIMALIGN_SCRIPT = """
import sys
from simalign import SentenceAligner
model, src, tgt, layer = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
aligner = SentenceAligner(model=model, token_type="bpe", matching_methods="a", layer=layer)
with open(src, encoding="utf-8") as s, open(tgt, encoding="utf-8") as t:
    for x, y in zip(s, t):
        links = aligner.get_word_aligns(x.split(), y.split())["inter"]
        print(" ".join(f"{i}-{j}" for i, j in links))
"""


def utilisation(result: dict) -> dict:
    """Model FLOPs utilisation of `polyalign align` in one `measure_aligner` result: the encoder's linear FLOPs up to
    the aligned layer per second of the whole command, over the best bf16 F.linear rate at the model's shapes."""
    bound = result["bound"]
    rates = bound["bf16_linear_gflops"]
    flops = sum(rates[name] * 1e9 * seconds for name, seconds in bound["linear_seconds_by_shape"].items())
    achieved = flops / result["polyalign"]["median_seconds"]
    peak = max(rates.values()) * 1e9
    return {"linear_gflops": flops / 1e9, "achieved_gflop_per_s": achieved / 1e9, "peak_gflop_per_s": peak / 1e9,
            "mfu": achieved / peak}  # fmt: skip


def simalign_against(model: Path, hf_folder: Path, simalign: Path, scratch: Path, options: tuple[str, ...]) -> dict:
    """SimAlign (argmax, layer 8) and `polyalign align` with `options` on the same 500 pairs, one round each."""
    src, tgt = write_pairs(scratch, SIMALIGN_PAIRS)
    layer = options[options.index("--layer") + 1] if "--layer" in options else "8"
    env = {**os.environ, "PYTHONPATH": str(simalign)}
    command = [sys.executable, "-c", SIMALIGN_SCRIPT, str(hf_folder), str(src), str(tgt), layer]
    started = time.perf_counter()
    with open(scratch / "simalign.links", "wb") as out:
        subprocess.run(command, check=True, stdout=out, env=env)
    simalign_seconds = time.perf_counter() - started
    ours = polyalign("align", "--model", str(model), "--src", str(src), "--tgt", str(tgt), "--no-progress", *options)
    with open(scratch / "polyalign.links", "wb") as out:
        polyalign_seconds = run(ours, stdout=out)[0]
    return {
        "pairs": SIMALIGN_PAIRS,
        "layer": int(layer),
        "simalign": {"seconds": simalign_seconds, "pairs_per_s": SIMALIGN_PAIRS / simalign_seconds},
        "polyalign": {"seconds": polyalign_seconds, "pairs_per_s": SIMALIGN_PAIRS / polyalign_seconds},
        "polyalign_options": list(options),
    }


def measure(model: Path, simalign: Path | None, options: tuple[str, ...], rounds: int = 2) -> dict:
    out: dict = {"model": str(model), "options": list(options), "threads": torch_threads()}
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for pairs in EFLOMAL_PAIRS:
            result = measure_aligner(model, pairs, rounds if pairs < 10000 else 1, scratch, options)
            out[f"eflomal_{pairs}"] = result | {"utilisation": utilisation(result)}
        if simalign is not None:
            hf = scratch / "hf"
            run(polyalign("export", "--model", str(model), "--out", str(hf)))
            argmax = ("--method", "argmax", "--encoding", "separate", "--layer", "8")
            out["simalign_500"] = simalign_against(model, hf, simalign, scratch, argmax)
    return out


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--simalign", type=Path, help="folder SimAlign was installed into (pip install -t)")
    ap.add_argument("--method", default="argmax")
    ap.add_argument("--layer", default="8")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    options = ("--method", args.method, "--encoding", "separate", "--layer", args.layer)
    result = measure(args.model, args.simalign, options)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for key in (f"eflomal_{p}" for p in EFLOMAL_PAIRS):
        r = result[key]
        ours, theirs = r["polyalign"]["pairs_per_s"], r["eflomal"]["pairs_per_s"]
        print(f"{key}: polyalign {ours:.0f} pairs/s, eflomal {theirs:.0f}, MFU {100 * r['utilisation']['mfu']:.1f}%")
    if "simalign_500" in result:
        r = result["simalign_500"]
        ours, theirs = r["polyalign"]["pairs_per_s"], r["simalign"]["pairs_per_s"]
        print(f"simalign_500: SimAlign {theirs:.1f}, polyalign {ours:.0f}")
    print(f"wrote {args.out}")
