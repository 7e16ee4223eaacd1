"""Training-step throughput on this machine: polyalign's MLM step against transformers' XLMRobertaForMaskedLM.

One run measures (a) the fp32 and bf16 matmul peak for the model's own GEMM shapes, (b) tokens/s and model
FLOPs utilisation (MFU) of a polyalign MLM training step, (c) the same for XLMRobertaForMaskedLM with the same
configuration (the `mlm` recipe: 6 layers, hidden 384, 6 heads, FFN 1536, vocabulary 32000, dropout 0.1,
attention dropout 0), sequence length, batch, masking and optimizer, each in fp32 and under bf16 autocast.
A step = forward, loss, backward, gradient clipping, AdamW update. Inputs are synthetic full-length rows
(no padding), masked with polyalign's own masking, the same batch for both stacks.
MFU = model FLOPs (polyalign/flops.py: encoder + MLM head at the masked positions, backward = 2x forward) per
second over the measured bf16 peak. transformers runs its MLM head at every position (as its
XLMRobertaForMaskedLM does); that extra work is not counted as model FLOPs.

Usage (2 CPU cores, ~5 min):
    flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.perf.throughput
    .venv/bin/python -m bench.perf.throughput --profile     # torch.profiler table of our bf16 step
Writes bench/results/throughput.md and throughput.json (and throughput_profile.txt with --profile).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.perf.cpu_speed import NOT_RECORDED, cpu_speed_section
from bench.perf.speed import (
    PRESETS,
    compare_on_same_batches,
    encoder_config,
    mlm_model_flops,
    polyalign_mlm,
    special_tokens,
    synthetic_batch,
    training_step,
    transformers_mlm,
)
from bench.reporting import commit, cpu_name, page_text, read_json, table

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / "bench" / "results"
PRESET = PRESETS["cpu-mlm"]
MODEL = PRESET.model


# ---------------------------------------------------------------------------------------------------------
# (a) matmul peak


def matmul_peak(tokens: int, dtype: torch.dtype, seconds: float = 0.5) -> dict[str, float]:
    """GFLOP/s of F.linear (what every projection runs) on the model's GEMM shapes; the best is the peak."""
    C, Fs, V = MODEL["hidden_size"], MODEL["ffn_size"], MODEL["vocab_size"]
    shapes = {  # name: (M, K, N) for x (M, K) @ W.T (K -> N)
        "qkv": (tokens, C, 3 * C),
        "ffn_up": (tokens, C, Fs),
        "ffn_down": (tokens, Fs, C),
        "mlm_decoder": (tokens * 15 // 100, C, V),
    }
    out = {}
    for name, (M, K, N) in shapes.items():
        x, w = torch.randn(M, K, dtype=dtype), torch.randn(N, K, dtype=dtype)
        F.linear(x, w)  # warm-up (oneDNN primitive creation)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            F.linear(x, w)
            n += 1
        out[name] = 2 * M * K * N * n / (time.perf_counter() - t0) / 1e9
    return out


# ---------------------------------------------------------------------------------------------------------
# (b), (c) training steps: bench/perf/speed.py's comparison, each stack in fp32 and under bf16 autocast


STACKS = {"polyalign": polyalign_mlm, "transformers": transformers_mlm}


def arm(stack: str, precision: str):
    """The step of one stack at one precision, built when the comparison asks for it."""
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def build():
        module, loss_of = STACKS[stack](PRESET, "cpu")
        return training_step(module, loss_of, PRESET.learning_rate, autocast)

    return build


def time_interleaved(stacks: list[str], batch: dict, warmup: int, rounds: int) -> tuple[dict, dict]:
    """Every stack in fp32 and bf16 on the same batch, with a matmul-peak measurement in each round so that other
    load on the machine falls on it too. Returns (runs, peak): each configuration's step seconds, losses and
    median, and the best GFLOP/s each GEMM shape reached in any round."""
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    peak: dict[str, dict[str, float]] = {p: {} for p in dtypes}
    tokens = batch["input_ids"].numel()

    def measure_peak() -> None:
        for p, dtype in dtypes.items():
            for shape, gflops in matmul_peak(tokens, dtype).items():
                peak[p][shape] = max(peak[p].get(shape, 0.0), gflops)

    arms = {f"{s}/{p}": arm(s, p) for s in stacks for p in dtypes}
    measured = compare_on_same_batches(arms, [batch], warmup, rounds, each_round=measure_peak)
    flops = mlm_model_flops(encoder_config(PRESET), batch)
    runs = {name: {"all_seconds": m["seconds"], "losses": m["losses"], "flops": flops} for name, m in measured.items()}
    for run in runs.values():
        run["seconds_per_step"] = statistics.median(run["all_seconds"])
    return runs, peak


def profile_step(step, batch: dict, out: Path, steps: int = 2) -> None:
    from torch.profiler import ProfilerActivity, profile

    step(batch)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step(batch)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60)
    out.write_text(f"torch.profiler, polyalign bf16 MLM step, {steps} steps, self CPU time\n\n{table}\n")
    print(table)


# ---------------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=PRESET.batch)
    ap.add_argument("--length", type=int, default=PRESET.length)
    ap.add_argument("--warmup", type=int, default=PRESET.warmup)
    ap.add_argument("--steps", type=int, default=PRESET.steps, help="timed rounds (one step of each configuration)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="profile our bf16 step instead of benchmarking")
    ap.add_argument("--only-polyalign", action="store_true", help="skip transformers (before/after comparisons)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--report-only", action="store_true", help="rewrite throughput.md from the JSON files in --out")
    args = ap.parse_args()
    if args.report_only:
        result = read_json(args.out / "throughput.json")
        (args.out / "throughput.md").write_text(report(result, "", args.out))
        return
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    batch = synthetic_batch(args.batch, args.length, 0, special_tokens(MODEL["vocab_size"]))
    tokens = args.batch * args.length
    if args.profile:
        profile_step(arm("polyalign", "bf16")(), batch, args.out / "throughput_profile.txt")
        return

    load_before = os.getloadavg()[0]  # other work on the machine shows here: the numbers assume it is idle
    stacks = ["polyalign"] if args.only_polyalign else list(STACKS)
    runs, peak = time_interleaved(stacks, batch, args.warmup, args.steps)
    print("matmul GFLOP/s:", json.dumps({p: {k: round(v) for k, v in r.items()} for p, r in peak.items()}))
    peak_bf16 = max(peak["bf16"].values())
    for name, r in runs.items():
        precision = name.split("/")[1]
        r["tokens_per_s"] = tokens / r["seconds_per_step"]
        r["model_gflops_per_s"] = r["flops"] / r["seconds_per_step"] / 1e9
        r["mfu_vs_bf16_peak"] = r["model_gflops_per_s"] / peak_bf16
        r["mfu_vs_own_precision_peak"] = r["model_gflops_per_s"] / max(peak[precision].values())
        print(f"{name:20s}: {r['tokens_per_s']:7.0f} tok/s, MFU {100 * r['mfu_vs_bf16_peak']:.1f}%")
    if args.only_polyalign:
        (args.out / "throughput.json").write_text(json.dumps({"matmul_gflops": peak, "runs": runs}, indent=2) + "\n")
        return
    ours, theirs = "polyalign/{}", "transformers/{}"
    ratios = {
        "ours_bf16_vs_transformers_fp32": runs[ours.format("bf16")]["tokens_per_s"]
        / runs[theirs.format("fp32")]["tokens_per_s"],
        "ours_bf16_vs_transformers_bf16": runs[ours.format("bf16")]["tokens_per_s"]
        / runs[theirs.format("bf16")]["tokens_per_s"],
        "ours_fp32_vs_transformers_fp32": runs[ours.format("fp32")]["tokens_per_s"]
        / runs[theirs.format("fp32")]["tokens_per_s"],
    }
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "code": commit(),
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        "cpu": cpu_name(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "batch": args.batch,
        "length": args.length,
        "tokens_per_step": tokens,
        "warmup": args.warmup,
        "steps": args.steps,
        "model": {**MODEL, "dropout": PRESET.dropout, "attention_dropout": PRESET.attention_dropout},
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "matmul_gflops": peak,
        "runs": runs,
        "ratios": ratios,
    }
    (args.out / "throughput.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "throughput.md").write_text(report(result, " ".join(sys.argv[1:]), args.out))
    print(json.dumps(ratios, indent=2))


def report(r: dict, argv: str, results: Path = RESULTS) -> str:
    """throughput.md: the training-step tables, then bench/perf/cpu_speed.py's section when it has been measured."""
    peak_bf16, peak_fp32 = max(r["matmul_gflops"]["bf16"].values()), max(r["matmul_gflops"]["fp32"].values())
    lines = [
        "# Training throughput: polyalign vs transformers (MLM step, `mlm` recipe size)",
        "",
        f"Machine: {r['cpu']}, {r['machine']}; torch {r['torch']}, transformers {r['transformers']}; {r['date']}; "
        "1-minute load average {:.1f} before, {:.1f} after.".format(*r.get("load_average_1min", [float("nan")] * 2)),
        f"Command: `flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.perf.throughput {argv}` (code: "
        f"{r.get('code', NOT_RECORDED)}; page written at {commit()}).",
        "",
        f"Protocol: batch {r['batch']} x {r['length']} tokens (no padding), 15% masked (80/10/10), "
        f"model 6 layers / hidden 384 / 6 heads / FFN 1536 / vocabulary 32000, dropout {PRESET.dropout}, attention "
        f"dropout {PRESET.attention_dropout}; a step = forward + loss + backward + clip + fused AdamW (both stacks); "
        f"median of {r['steps']} rounds after {r['warmup']} warm-up steps; the four configurations run one step "
        "each per round, in rotating order, with a matmul-peak measurement (0.5 s per shape) in every round, so "
        "that other load on the machine falls on all alike. Peak = best GFLOP/s any round reached. MFU = model "
        "FLOPs/s (polyalign/flops.py) over the bf16 peak; transformers also computes MLM logits at unmasked "
        "positions, which is not counted.",
        "",
        table(
            ["matmul (F.linear)", *r["matmul_gflops"]["fp32"]],
            [[f"{p} GFLOP/s", *(f"{v:.0f}" for v in r["matmul_gflops"][p].values())] for p in ("fp32", "bf16")],
            align="l" + "r" * len(r["matmul_gflops"]["fp32"]),
        ),
        f"Peak: fp32 {peak_fp32:.0f} GFLOP/s, bf16 {peak_bf16:.0f} GFLOP/s.",
        "",
        table(
            [
                "stack",
                "precision",
                "s/step",
                "tokens/s",
                "model GFLOP/s",
                "MFU (bf16 peak)",
                "MFU (own-precision peak)",
            ],
            [
                [
                    *name.split("/"),
                    f"{run['seconds_per_step']:.2f}",
                    f"{run['tokens_per_s']:.0f}",
                    f"{run['model_gflops_per_s']:.0f}",
                    f"{100 * run['mfu_vs_bf16_peak']:.1f}%",
                    f"{100 * run['mfu_vs_own_precision_peak']:.1f}%",
                ]
                for name, run in r["runs"].items()
            ],
            align="llrrrrr",
        ),
    ]
    q = r["ratios"]
    lines += [
        table(
            ["ratio (tokens/s)", "measured", "goal"],
            [
                ["polyalign bf16 / transformers fp32", f"{q['ours_bf16_vs_transformers_fp32']:.2f}x", ">= 2x"],
                ["polyalign bf16 / transformers bf16", f"{q['ours_bf16_vs_transformers_bf16']:.2f}x", ">= 1.2x"],
                ["polyalign fp32 / transformers fp32", f"{q['ours_fp32_vs_transformers_fp32']:.2f}x", ""],
                ["polyalign bf16 MFU", f"{100 * r['runs']['polyalign/bf16']['mfu_vs_bf16_peak']:.1f}%", ">= 35%"],
            ],
            align="lrr",
        ),
    ]
    lines += cpu_speed_section(results / "cpu_speed.json")  # aligner vs eflomal, Tatoeba-14, prepare
    return page_text(lines)


def _version(package: str) -> str:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:
        return "not installed"


if __name__ == "__main__":
    main()
