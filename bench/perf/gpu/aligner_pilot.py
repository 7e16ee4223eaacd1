"""A CPU pilot of the GPU aligner's learning rate: bench/perf/gpu/aligner.py's self-training arm (the `self-align`
recipe, 128 pairs a step over the aligner pack, from its trimmed multilingual-e5-small, at the layer its rule picks
on the dev halves) at each of LRS, each on a schedule scaled to the steps the pilot makes (warm-up and linear decay
spanning exactly them), with the mean dev-half argmax AER at the start and at CHECKPOINTS evenly spaced checkpoints.
It decides the GPU arm's learning rate (aligner.py `FULL.lr`).

THE RULE, written before the pilot ran: the largest learning rate among LRS (5e-5, 2e-5, 1e-5) whose last
checkpoint's mean dev-half AER (argmax, the GPU arm's rule layer, the pack's 7 gold sets) is at or below the start's
and within TOLERANCE (0.3 AER points) of the lowest mean among its own checkpoints; when none is, FALLBACK (1e-5).
A rate whose run is still falling at its end passes; one that rose above the start, or is climbing back from an
earlier low, does not.

THE PLAN (2 CPU cores shared by several people; ~20 CPU-minutes in all, the scores included): `--measure` first times
an 8-step run of the recipe and one checkpoint's dev-half scoring; STEPS per learning rate is what the rest allows.
The pilot runs in pieces under the machine's CPU lock, each ending before `--piece` seconds (a learning rate's
training is started only when its estimated time fits what is left of the piece); every run, checkpoint and score
stays in bench/work/aligner-pilot (git-ignored), so the next piece resumes where the last stopped:

    python bench/perf/aligner_pack.py --fraction 0.73                     # the pack, once (bench/work)
    flock /tmp/polyalign-cpu.lock python bench/perf/gpu/aligner_pilot.py --measure
    flock /tmp/polyalign-cpu.lock python bench/perf/gpu/aligner_pilot.py --piece 330   # again until "decided"
    python -m bench.page aligner_pilot                                      # the page again from its JSON

The last piece writes bench/results/aligner_pilot.json and draws its page (aligner_pilot.md and .png).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from bench import selection as S  # noqa: E402
from bench.perf.gpu import aligner as A  # noqa: E402
from bench.perf.gpu.step import Step  # noqa: E402
from bench.reporting import Block, commit, machine, page_text, provenance, write_json  # noqa: E402

LRS = (5e-5, 2e-5, 1e-5)
FALLBACK = 1e-5
TOLERANCE = 0.3
CHECKPOINTS = 4
STEPS = 16
"""Steps per learning rate, set from `--measure` before the pilot ran (4.9 s a step, 27 s to score a checkpoint, 8 s
of start-up): 3 x (8 + 16 x 4.9 + 4 x 27) s is ~10 minutes, what the ~20 left after the pack's unpacking, the
start's layer sweep and two measures (a 2-step one read 18 s a step with another process on the cores: discarded,
as was an 8-step run at 5e-5 planned from it, before any of its scores were read); 16 keeps 4 checkpoints (every 4
steps), 2,048 pairs a rate."""
ARM = "self-align"
CPU_OVERRIDES = ("trainer.loader_workers=0", "trainer.log_every=1")
"""The batches built in the training process (two cores: no loader processes beside it); every step's loss logged."""
MEASURE_STEPS = 8
WORK = ROOT / "bench" / "work" / "aligner-pilot"
RESULTS = ROOT / "bench" / "results"
NAME = "aligner_pilot"
RULE = (
    f"the largest learning rate among {', '.join(f'{lr:g}' for lr in LRS)} whose last checkpoint's mean dev-half "
    f"AER is at or below the start's and within {TOLERANCE} of the lowest mean among its own checkpoints; else "
    f"{FALLBACK:g}"
)


# ---------------------------------------------------------------------------------------------------------
# The rule


def decide(curves: dict[float, list[float]], start: float) -> float:
    """The rule: `curves` maps a learning rate to its checkpoints' mean dev-half AER in step order; `start` is the
    start's mean."""
    passing = [
        lr for lr, means in curves.items() if means and means[-1] <= start and means[-1] <= min(means) + TOLERANCE
    ]
    return max(passing, default=FALLBACK)


# ---------------------------------------------------------------------------------------------------------
# The runs


def plan(lr: float, steps: int) -> A.Plan:
    """The GPU arm's plan at `lr`, its schedule capped at `steps` (the pilot's length) with no card rate."""
    return replace(A.FULL, lr=lr, step_cap=steps, steps_per_minute=None, overrides=A.FULL.overrides + CPU_OVERRIDES)


def run_name(lr: float) -> str:
    return f"lr-{lr:g}-{STEPS}-steps"


def piece_step(seconds: float) -> Step:
    return Step("aligner-pilot", WORK, WORK / "logs", time.time() + seconds, dry_run=False)


def start_layer(step: Step, inputs: A.Inputs) -> tuple[int, dict]:
    """The GPU arm's layer rule on the start (its argmax scores at every rule layer, kept in the work folder)."""
    start = A.scores(step, inputs, "start", inputs.start, ("argmax",), A.FULL.rule_layers)
    layer = min(A.FULL.rule_layers, key=lambda i: S.mean(A.dev_aer(start, "argmax", i), inputs.gold_sets))
    return layer, start


def logged_seconds(run_dir: Path) -> list[float]:
    """The run's training seconds after each logged step, as its metrics log counted them (start-up and saving
    aside)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["seconds"] for line in lines if line.strip() and "seconds" in json.loads(line)]


def trained_seconds(run_dir: Path) -> float:
    return max(logged_seconds(run_dir))


def step_times(run_dir: Path) -> list[float]:
    """Each logged step's own seconds after the first (whose count holds the run's first-step costs)."""
    seconds = logged_seconds(run_dir)
    return [b - a for a, b in zip(seconds, seconds[1:], strict=False)]


def measure(seconds: float) -> dict:
    """A short run of the recipe and the scoring of its last checkpoint at the rule's layer, timed (a step's time:
    the median of its steps', the first's start-up and a moment's contention on shared cores aside); the start's
    scores."""
    from polyalign.checkpoint import latest_checkpoint

    step = piece_step(seconds)
    inputs = A.unpack(step)
    if inputs is None:
        raise SystemExit("no aligner pack: python bench/perf/aligner_pack.py --fraction 0.73")
    t0 = time.perf_counter()
    layer, _ = start_layer(step, inputs)
    sweep_s = time.perf_counter() - t0
    run_dir, record = A.train(step, inputs, ARM, layer, plan(LRS[0], MEASURE_STEPS), WORK / "measure")
    t0 = time.perf_counter()
    A.scores(step, inputs, "measure", latest_checkpoint(run_dir), ("argmax",), (layer,))
    score_s = time.perf_counter() - t0
    out = {"steps": MEASURE_STEPS, "command_s": round(record["seconds"], 1), "layer": layer,
           "step_s": round(statistics.median(step_times(run_dir)), 2), "score_s": round(score_s, 1),
           "start_sweep_s": round(sweep_s, 1)}  # fmt: skip
    (WORK / "measure.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def run_piece(seconds: float) -> dict | None:
    """Train and score what is left, until the piece's time would run out; the result once every rate is done."""
    from polyalign.checkpoint import checkpoint_dirs, checkpoint_step

    if not STEPS:
        raise SystemExit("STEPS is not set: run --measure and set it from the step time first")
    timing = json.loads((WORK / "measure.json").read_text())
    step = piece_step(seconds)
    inputs = A.unpack(step)
    layer, start = start_layer(step, inputs)
    runs = {}
    for lr in LRS:
        run_dir = WORK / "runs" / run_name(lr)
        if not (run_dir / "done").is_file():
            made = max((checkpoint_step(c) for c in checkpoint_dirs(run_dir)), default=0)
            needed = timing["command_s"] - MEASURE_STEPS * timing["step_s"] + (STEPS - made) * timing["step_s"]
            if needed > step.left():
                print(f"{run_name(lr)}: ~{needed:.0f} s of training, {step.left():.0f} s left in this piece: resume")
                return None
        _, record = A.train(step, inputs, ARM, layer, plan(lr, STEPS), run_dir)
        points = []
        for folder in checkpoint_dirs(run_dir):
            name = f"{run_name(lr)}@{checkpoint_step(folder)}"
            if not (WORK / "aligner" / "scores" / f"{name}.json").is_file() and step.left() < 1.5 * timing["score_s"]:
                print(f"{name}: ~{timing['score_s']:.0f} s of scoring, {step.left():.0f} s left in this piece: resume")
                return None
            dev = A.dev_aer(A.scores(step, inputs, name, folder, ("argmax",), (layer,)), "argmax", layer)
            points.append(
                {"step": checkpoint_step(folder), "dev": dev, "mean": round(S.mean(dev, inputs.gold_sets), 3)}
            )
        runs[f"{lr:g}"] = {"training": record | {"training_s": round(trained_seconds(run_dir), 1)},
                           "checkpoints": points}  # fmt: skip
    start_dev = A.dev_aer(start, "argmax", layer)
    start_mean = round(S.mean(start_dev, inputs.gold_sets), 3)
    chosen = decide({float(lr): [p["mean"] for p in r["checkpoints"]] for lr, r in runs.items()}, start_mean)
    return {
        "command": "python bench/perf/gpu/aligner_pilot.py --piece SECONDS (repeated under the CPU lock)",
        "commit": commit(),
        "machine": machine(),
        "rule": RULE,
        "lrs": [f"{lr:g}" for lr in LRS],
        "steps": STEPS,
        "pairs_per_step": A.FULL.pairs_per_step,
        "layer": layer,
        "gold_sets": list(inputs.gold_sets),
        "pack": {k: inputs.described.get(k) for k in ("command", "fraction", "total_pairs", "tokens")},
        "measure": timing,
        "start": {"dev": start_dev, "mean": start_mean},
        "runs": runs,
        "chosen_lr": f"{chosen:g}",
    }


# ---------------------------------------------------------------------------------------------------------
# The page


def write_page(saved: dict, page: Path) -> Path:
    """The page from the pilot's JSON: its command, commit, rule, each rate's dev curve as numbers and a plot, and the
    rate the rule chose."""
    from bench.figures import checkpoint_curves

    sets, start = saved["gold_sets"], saved["start"]
    series = {
        f"lr {lr}": (
            [0, *(p["step"] for p in r["checkpoints"])],
            [start["mean"], *(p["mean"] for p in r["checkpoints"])],
        )
        for lr, r in saved["runs"].items()
    }
    plot = checkpoint_curves(series, {}, f"Self-training, {saved['pairs_per_step']} pairs a step: mean dev-half AER",
                             page.with_suffix(".png"))  # fmt: skip
    rows = [["start", "0", *(f"{start['dev'][g]:.2f}" for g in sets), f"{start['mean']:.2f}"]]
    rows += [[lr, str(p["step"]), *(f"{p['dev'][g]:.2f}" for g in sets), f"{p['mean']:.2f}"]
             for lr, r in saved["runs"].items() for p in r["checkpoints"]]  # fmt: skip
    training = [[lr, str(t["max_steps"]), str(t["warmup_steps"]), f"{t['pairs_seen']:,}", f"{t['training_s']:.0f}"]
                for lr, t in ((lr, r["training"]) for lr, r in saved["runs"].items())]  # fmt: skip
    m = saved["measure"]
    parts = [
        "# The GPU aligner's learning rate: a CPU pilot of its self-training arm",
        "",
        provenance(saved["command"], runs_from=saved["commit"]),
        "",
        f"The rule, written before the pilot ran (bench/perf/gpu/aligner_pilot.py): {saved['rule']}.",
        "",
        f"**Chosen: lr {saved['chosen_lr']}** (bench/perf/gpu/aligner.py `FULL.lr`).",
        "",
        f"The recipe: bench/perf/gpu/aligner.py's self-training arm, {saved['pairs_per_step']} pairs a step over the "
        f"aligner pack ({saved['pack']['total_pairs']:,} pairs, `{saved['pack']['command'].strip()}`), from its "
        f"trimmed multilingual-e5-small at layer {saved['layer']} (the arm's layer rule on the start's dev halves); "
        f"each learning rate's schedule is the pilot's {saved['steps']} steps, warm-up and linear decay inside them. "
        f"The step time measured first: {m['step_s']} s a step ({m['steps']}-step run), {m['score_s']} s to score a "
        f"checkpoint on the dev halves.",
        "",
        Block(
            heading="Dev halves: argmax AER (%) at each checkpoint",
            header=("lr", "step", *sets, "mean"),
            rows=tuple(map(tuple, rows)),
            align="lr" + "r" * (len(sets) + 1),
        ),  # fmt: skip
        Block(
            heading="Training",
            header=("lr", "steps", "warm-up steps", "pairs seen", "training s"),
            rows=tuple(map(tuple, training)),
            align="lrrrr",
        ),  # fmt: skip
        f"![mean dev-half AER by step]({plot.name})",
        "",
    ]
    page.write_text(page_text(parts))
    return page


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measure", action="store_true", help="time a 2-step run and one checkpoint's scoring")
    ap.add_argument("--piece", type=float, default=330, help="end this piece before this many seconds")
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.piece)))
        return
    result = run_piece(args.piece)
    if result is None:
        return
    write_json(RESULTS / f"{NAME}.json", result)
    print(write_page(result, RESULTS / f"{NAME}.md"))
    print(f"decided: lr {result['chosen_lr']}")


if __name__ == "__main__":
    main()
