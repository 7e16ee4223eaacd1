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

import numpy as np
import torch
import torch.nn.functional as F

from bench.perf.cpu_speed import NOT_RECORDED, cpu_speed_section
from bench.reporting import commit, cpu_name, read_json
from polyalign.config import TrainerConfig
from polyalign.data.layout import sentence_layout
from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.model.hf import hf_sizes
from polyalign.objectives.mlm import MLM, MLMConfig, masked_batch
from polyalign.tokenizer import SpecialTokens
from polyalign.train import PretrainingModule, parameter_groups

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / "bench" / "results"


def special_tokens(vocab_size: int) -> SpecialTokens:
    return SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=vocab_size, first_normal=5)


SPECIAL = special_tokens(32000)
# The `mlm` recipe's model (polyalign/recipes/mlm.yaml).
MODEL = dict(vocab_size=32000, hidden_size=384, num_layers=6, num_heads=6, ffn_size=1536, max_positions=256)
DROPOUT, ATTENTION_DROPOUT = 0.1, 0.0


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
# (b), (c) training steps


def synthetic_batch(
    batch: int, length: int, seed: int = 0, special: SpecialTokens = SPECIAL
) -> dict[str, torch.Tensor]:
    """Full-length `<s> x </s>` rows of random ordinary tokens, masked as the MLM objective masks."""
    rng = np.random.default_rng(seed)
    rows = [rng.integers(special.first_normal, special.vocab_size, length - 2) for _ in range(batch)]
    return masked_batch(sentence_layout(rows, None, special), special, MLMConfig(), rng)


def training_step(module: torch.nn.Module, loss_and_flops):
    """One step as polyalign's trainer runs it, for either stack: loss, backward, clip, fused AdamW (the same
    optimizer for both, so that the comparison is of the model step)."""
    trainer = TrainerConfig()
    groups = parameter_groups(module, trainer)  # weight decay on matrices only
    optimizer = torch.optim.AdamW(groups, lr=1e-4, betas=trainer.betas, eps=trainer.eps, fused=True)

    def step() -> tuple[float, float]:
        loss, flops = loss_and_flops()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), trainer.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach()), flops

    return step


def polyalign_step(batch: dict[str, torch.Tensor]):
    torch.manual_seed(0)
    config = EncoderConfig(**MODEL, dropout=DROPOUT, attention_dropout=ATTENTION_DROPOUT)
    model = MaskedLanguageModel(config)
    module = PretrainingModule(model, {"mlm": MLM(MLMConfig(), SPECIAL, config)}, {"mlm": 1.0}).train()

    def loss_and_flops():
        loss, _, flops = module({"mlm": batch})
        return loss, flops

    return training_step(module, loss_and_flops)


def transformers_step(batch: dict[str, torch.Tensor]):
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    torch.manual_seed(0)
    config = XLMRobertaConfig(
        **hf_sizes(EncoderConfig(**MODEL)),
        max_position_embeddings=MODEL["max_positions"] + 2,
        type_vocab_size=1,
        hidden_dropout_prob=DROPOUT,
        attention_probs_dropout_prob=ATTENTION_DROPOUT,
        layer_norm_eps=1e-5,
    )
    model = XLMRobertaForMaskedLM(config).train()
    B, T = batch["input_ids"].shape
    ours = EncoderConfig(**MODEL)
    n = int((batch["labels"] != -100).sum())
    flops = training_flops(encoder_forward_flops(ours, B, T) + mlm_head_forward_flops(ours, n))

    def loss_and_flops():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        return out.loss, flops

    return training_step(model, loss_and_flops)


def time_interleaved(configs: dict, tokens: int, warmup: int, rounds: int) -> tuple[dict, dict]:
    """Time every configuration one step at a time, round-robin, with a matmul-peak measurement in each round,
    so that other load on the machine falls on all of them alike. Returns (runs, peak): a median step time per
    configuration, and the best GFLOP/s each GEMM shape reached in any round."""
    autocast = {p: torch.autocast("cpu", dtype=torch.bfloat16, enabled=p == "bf16") for p in ("fp32", "bf16")}
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    runs = {name: {"all_seconds": [], "losses": []} for name in configs}
    peak: dict[str, dict[str, float]] = {p: {} for p in dtypes}
    for step, precision in configs.values():
        for _ in range(warmup):
            with autocast[precision]:
                step()
    for r in range(rounds):
        for p, dtype in dtypes.items():
            for shape, gflops in matmul_peak(tokens, dtype).items():
                peak[p][shape] = max(peak[p].get(shape, 0.0), gflops)
        names = list(configs)
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate who goes first
            step, precision = configs[name]
            t0 = time.perf_counter()
            with autocast[precision]:
                loss, flops = step()
            runs[name]["all_seconds"].append(time.perf_counter() - t0)
            runs[name]["losses"].append(loss)
            runs[name]["flops"] = flops
    for run in runs.values():
        run["seconds_per_step"] = statistics.median(run["all_seconds"])
    return runs, peak


def profile_step(step, out: Path, steps: int = 2) -> None:
    from torch.profiler import ProfilerActivity, profile

    with torch.autocast("cpu", dtype=torch.bfloat16):
        step()  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60)
    out.write_text(f"torch.profiler, polyalign bf16 MLM step, {steps} steps, self CPU time\n\n{table}\n")
    print(table)


# ---------------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="timed rounds (one step of each configuration each)")
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
    batch = synthetic_batch(args.batch, args.length)
    tokens = args.batch * args.length
    if args.profile:
        profile_step(polyalign_step(batch), args.out / "throughput_profile.txt")
        return

    load_before = os.getloadavg()[0]  # other work on the machine shows here: the numbers assume it is idle
    stacks = {"polyalign": polyalign_step, "transformers": transformers_step}
    if args.only_polyalign:
        del stacks["transformers"]
    configs = {f"{s}/{p}": (build(batch), p) for s, build in stacks.items() for p in ("fp32", "bf16")}
    runs, peak = time_interleaved(configs, tokens, args.warmup, args.steps)
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
        "model": {**MODEL, "dropout": DROPOUT, "attention_dropout": ATTENTION_DROPOUT},
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "matmul_gflops": peak,
        "runs": runs,
        "ratios": ratios,
    }
    (args.out / "throughput.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "throughput.md").write_text(report(result, " ".join(sys.argv[1:]), args.out))
    print(json.dumps(ratios, indent=2))


def report(r: dict, argv: str, results: Path = RESULTS) -> str:
    """throughput.md: the training-step tables, then bench/cpu_speed.py's section when it has been measured."""
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
        f"model 6 layers / hidden 384 / 6 heads / FFN 1536 / vocabulary 32000, dropout {DROPOUT}, attention "
        f"dropout {ATTENTION_DROPOUT}; a step = forward + loss + backward + clip + fused AdamW (both stacks); "
        f"median of {r['steps']} rounds after {r['warmup']} warm-up steps; the four configurations run one step "
        "each per round, in rotating order, with a matmul-peak measurement (0.5 s per shape) in every round, so "
        "that other load on the machine falls on all alike. Peak = best GFLOP/s any round reached. MFU = model "
        "FLOPs/s (polyalign/flops.py) over the bf16 peak; transformers also computes MLM logits at unmasked "
        "positions, which is not counted.",
        "",
        "| matmul (F.linear) | " + " | ".join(r["matmul_gflops"]["fp32"]) + " |",
        "|---|" + "---:|" * len(r["matmul_gflops"]["fp32"]),
    ]
    for p in ("fp32", "bf16"):
        lines.append(f"| {p} GFLOP/s | " + " | ".join(f"{v:.0f}" for v in r["matmul_gflops"][p].values()) + " |")
    lines += [
        "",
        f"Peak: fp32 {peak_fp32:.0f} GFLOP/s, bf16 {peak_bf16:.0f} GFLOP/s.",
        "",
        "| stack | precision | s/step | tokens/s | model GFLOP/s | MFU (bf16 peak) | MFU (own-precision peak) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, run in r["runs"].items():
        stack, precision = name.split("/")
        lines.append(
            f"| {stack} | {precision} | {run['seconds_per_step']:.2f} | {run['tokens_per_s']:.0f} | "
            f"{run['model_gflops_per_s']:.0f} | {100 * run['mfu_vs_bf16_peak']:.1f}% | "
            f"{100 * run['mfu_vs_own_precision_peak']:.1f}% |"
        )
    q = r["ratios"]
    lines += [
        "",
        "| ratio (tokens/s) | measured | goal |",
        "|---|---:|---:|",
        f"| polyalign bf16 / transformers fp32 | {q['ours_bf16_vs_transformers_fp32']:.2f}x | >= 2x |",
        f"| polyalign bf16 / transformers bf16 | {q['ours_bf16_vs_transformers_bf16']:.2f}x | >= 1.2x |",
        f"| polyalign fp32 / transformers fp32 | {q['ours_fp32_vs_transformers_fp32']:.2f}x | |",
        f"| polyalign bf16 MFU | {100 * r['runs']['polyalign/bf16']['mfu_vs_bf16_peak']:.1f}% | >= 35% |",
        "",
    ]
    lines += cpu_speed_section(results / "cpu_speed.json")  # aligner vs eflomal, Tatoeba-14, prepare
    return "\n".join(lines)


def _version(package: str) -> str:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:
        return "not installed"


if __name__ == "__main__":
    main()
