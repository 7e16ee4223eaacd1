"""Step 6 of the GPU check: the evidence study's section `xlm-e-gpu` trained and measured on the GPU.

XLM-E's MRTD + TRTD against MLM + TLM from scratch at 3e16 training FLOPs per arm (bench/studies/gpu_evidence.py),
on the data pack that travels with the check (bench/perf/gpu_pack.py), through the harness's own runner
(bench/run.py: the FLOP probe, training, the measures) and the rule of bench/verdict.py. After every arm the
section's JSON, each arm's metrics.jsonl and the step's parts are written, so a step cut at its budget keeps what it
measured. The dry run does the same on the CPU: a pack of 2% of three languages, a 2 x 32 model, 3e10 FLOPs.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

from bench.perf.gpu_pack import DEFAULT_PACK, SHARED, build_pack
from bench.study import Budget, Section

SECTION = "xlm-e-gpu"
DRY_FLOPS = 3e10
DRY_LANGUAGES = ("en", "de", "fr")
TINY = (
    "model.hidden_size=32",
    "model.num_layers=2",
    "model.num_heads=2",
    "model.ffn_size=64",
    "data.mono.max_tokens=1024",
    "data.parallel.max_tokens=1024",
    "trainer.grad_accumulation=1",
    "trainer.loader_workers=0",
)


def shrunk(section: Section) -> Section:
    """The section at dry-run size: every arm a 2 x 32 model on 1,024-token batches, a 3e10-FLOP budget, three
    languages; arm names, checks and the rule unchanged."""
    setup = dataclasses.replace(
        section.setup, budget=Budget(max_flops=DRY_FLOPS), languages=DRY_LANGUAGES, device="cpu"
    )
    tiny = {a.name: dataclasses.replace(a, overrides=(*a.overrides, *TINY)) for a in section.arms}
    comparisons = [
        dataclasses.replace(c, setup=setup, baseline=tiny[c.baseline.name], method=tiny[c.method.name])
        for c in section.comparisons
    ]
    return Section(section.name, comparisons)


def pack_for(step) -> Path | None:
    """The GPU's carried pack, or for the dry run a tiny one built from ../shared (None when that is absent)."""
    if not step.dry_run:
        return DEFAULT_PACK if (DEFAULT_PACK / "pack.json").is_file() else None
    if not (SHARED / "data" / "train").is_dir() or not (SHARED / "models" / "small-base").is_dir():
        return None
    pack = step.work / "pack"
    if not (pack / "pack.json").is_file():
        shutil.rmtree(pack, ignore_errors=True)
        build_pack(pack, DRY_LANGUAGES, fraction=0.02, dev_pairs=50)
    return pack


def step_evidence(step) -> None:
    import torch

    from bench.run import Context, run_section
    from bench.studies import STUDIES

    if not step.dry_run and not torch.cuda.is_available():
        step.part("pack", status="skipped: no CUDA")
        return
    pack = pack_for(step)
    if pack is None:
        where = "../shared/data to build the dry run's pack from" if step.dry_run else "data pack"
        step.part("pack", status=f"skipped: no {where} (python bench/perf/gpu_pack.py; carry bench/work/gpu-pack)")
        return
    described = json.loads((pack / "pack.json").read_text())
    step.part("pack", status="ok", megabytes=described["megabytes"], training_tokens=described["training_tokens"])
    section = STUDIES["evidence"].sections()[SECTION]
    section = shrunk(section) if step.dry_run else section
    out = step.logs.parent / "evidence"
    ctx = Context(section, pack / "prepared", step.work / "evidence-runs", pack / "eval", sys.executable)

    def save(result: dict) -> None:
        record(step, ctx, result, described, out)

    step.part(SECTION, status="failed: unfinished at the step's deadline")
    save(run_section(ctx, "evidence", max_seeds=1, saved=save))
    step.part(SECTION, status="ok")


def record(step, ctx, result: dict, described: dict, out: Path) -> None:
    """The section's JSON (as bench.run writes it), each finished arm's training log, and the step's parts: each
    arm's training (steps, FLOPs, passes over the pack's tokens) and each comparison's row by the evidence rule."""
    from bench import verdict as V
    from bench.page import words
    from bench.run import run_dir
    from bench.studies import STUDIES

    out.mkdir(parents=True, exist_ok=True)
    result["command"] = "python bench/perf/gpu_check.py --steps evidence" + (" --dry-run" if step.dry_run else "")
    (out / f"{SECTION}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    for arm in ctx.section.arms:
        seed = result["results"].get(arm.name, {}).get("0")
        if seed is None:
            continue
        log = run_dir(ctx, arm, 0) / "metrics.jsonl"
        if log.is_file():
            shutil.copy(log, out / f"{arm.name}.metrics.jsonl")
        train = seed.get("train", {})
        tokens = train_tokens(log)
        step.part(
            f"train {arm.name}",
            status="ok",
            steps=train.get("steps"),
            training_flops=train.get("flops"),
            seconds=train.get("seconds"),
            tokens=tokens,
            passes_over_pack=tokens / described["training_tokens"] if tokens else None,
        )
    floors = result.get("floors", {})
    for check in dict.fromkeys(ch for c in ctx.section.comparisons for ch in c.why.checks):
        if (numbers := V.check_numbers(check, result)) is None:
            continue
        held = V.premise(check, result, floors)
        against = f"{held[1]} {held[2]:.4g}" if held else f"unigram floor {floors.get(check.floor, float('nan')):.4g}"
        step.part(
            f"{check.label} ({check.arm})",
            status="ok",
            first=numbers[0],
            last=numbers[-1],
            against=against,
            premise_held=held[3] if held else "-",
        )
    rows = {c.id: V.comparison_row(c, result) for c in ctx.section.comparisons}
    study = dataclasses.replace(STUDIES["evidence"], comparisons=tuple(ctx.section.comparisons))
    for c in ctx.section.comparisons:
        row = rows[c.id]
        reading = words(V.reading(study, c, rows, {SECTION: result})) if row["verdict"] == V.NOT_REPRODUCED else ""
        step.part(
            c.id,
            status="ok" if row["difference"] is not None else "skipped: not measured yet",
            baseline=row["baseline"],
            method=row["method"],
            difference=row["difference"],
            verdict=row["verdict"],
            reading=reading,
        )


def train_tokens(log: Path) -> int | None:
    """The run's training tokens: the last logged `tokens` (the trainer logs the running total)."""
    if not log.is_file():
        return None
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return next((r["tokens"] for r in reversed(records) if "tokens" in r), None)
