"""A comparison study's sections, each arm trained and measured: the study runner behind `python -m bench.run STUDY`.

Every (arm, seed) run leaves a `done` marker and every measure its JSON, so a rerun only does what is missing. Runs
live in WORK/runs under a hash of what they train, so sections share the runs of the same arm. Seed 0 of every arm
first; seed 1 of a comparison's arms only when its seed-0 difference is under the rule's `close` points. Writes
bench/results/STUDY/sections/SECTION.json, which `python -m bench.run STUDY --page` turns into the page.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.arm import Arm, fill, key_text
from bench.budget import quarter_means
from bench.floors import unigram_floor
from bench.measures import MEASURES, Target
from bench.reporting import commit, records, write_json
from bench.study import Section, Study
from bench.verdict import difference, needs_second_seed
from polyalign.checkpoint import checkpoint_dirs, checkpoint_step
from polyalign.train.head_warmup import HEAD_WARMUP_FILE

ROOT = Path(__file__).resolve().parents[1]
LOG_WINDOW = 10
MINUTES = "minutes.json"
KEY = "key.txt"


@dataclass
class SectionRun:
    """One section being run: what it trains on, where its runs live, how commands run (not a step's
    bench/step.py `Context`: a section runs commands, a step records parts)."""

    section: Section
    data: Path
    """Prepared folder (`polyalign prepare ... --dev-pairs 1000`)."""
    runs: Path
    """Where the runs and their evaluations live, shared by every section of the study."""
    eval_root: Path
    python: str
    dry_run: bool = False

    @property
    def cli(self) -> list[str]:
        return [self.python, "-m", "polyalign.cli"]


def sh(ctx: SectionRun, cmd: list[str]) -> None:
    print("+ " + " ".join(cmd), flush=True)
    if not ctx.dry_run:
        subprocess.run(cmd, check=True, cwd=ROOT)


def clear(ctx: SectionRun, folder: Path) -> None:
    """Remove an unfinished run's folder before training it again; a dry run removes nothing (it may be printing
    the commands while that run trains)."""
    if not ctx.dry_run:
        shutil.rmtree(folder, ignore_errors=True)


def run_key(ctx: SectionRun, arm: Arm) -> str:
    """The arm's training key and the data, as text (bench/study.py `key_text`): the same training in any section
    is the same run; any change to what is trained or measured is another."""
    return key_text((ctx.section.training_key(arm), str(ctx.data)))


def run_hash(ctx: SectionRun, arm: Arm) -> str:
    return hashlib.sha1(run_key(ctx, arm).encode()).hexdigest()[:10]


def run_dir(ctx: SectionRun, arm: Arm, seed: int) -> Path:
    return ctx.runs / f"{arm.name if not arm.trained else f'{arm.name}-s{seed}'}-{run_hash(ctx, arm)}"


# A run of more steps checkpoints this often, so one cut when its session ends resumes there (a long
# arm spans several sittings); 200 e5-small steps are 12-17 CPU-minutes.
SITTING_STEPS = 200


def budget_overrides(ctx: SectionRun, steps: int) -> list[str]:
    """The budget as `--set` values: steps (and their schedule), FLOPs, or training minutes; a minutes budget
    leaves the schedule to the recipe and the arm (the preset sweep's lr stays at its peak, the best recipe's
    stages keep their own)."""
    budget, languages = ctx.section.setup.budget, ctx.section.setup.languages
    if budget.minutes:
        sets = [f"trainer.max_minutes={budget.minutes:g}"]
    else:
        # a FLOP budget (a GPU's) saves once, at its end
        every = steps if budget.max_flops else min(steps, SITTING_STEPS)
        sets = [f"trainer.max_steps={steps}", f"trainer.warmup_steps={max(1, steps // 10)}"]
        sets += [f"trainer.save_every={every}", f"trainer.log_every={max(1, steps // 60)}"]
    sets += [f"trainer.max_flops={budget.max_flops:g}"] if budget.max_flops else []
    return sets + ([f"data.languages=[{','.join(languages)}]"] if languages else [])


def pretrain_command(ctx: SectionRun, arm: Arm, seed: int, steps: int, out: Path, budget: bool = True) -> list[str]:
    cmd = [*ctx.cli, "pretrain", arm.recipe, "--data", str(ctx.data), "--run-dir", str(out), "--no-progress"]
    start = str(run_dir(ctx, arm.continues, seed)) if arm.continues else arm.init_from
    cmd += ["--init-from", start] if start is not None else []
    cmd += ["--preset", arm.preset] if arm.preset is not None else []
    sets = [f"trainer.seed={seed}", *budget_overrides(ctx, steps), *(fill(o, steps) for o in arm.overrides)]
    if not budget:  # the FLOP probe runs 3 steps whatever the budget
        sets = [s for s in sets if not s.startswith("trainer.max_flops=")]
    return cmd + [x for s in sets for x in ("--set", s)]


def probe_steps(ctx: SectionRun, arm: Arm) -> int:
    """Steps that spend a FLOP budget: the budget over the mean FLOPs per step of a 3-step probe."""
    budget = ctx.section.setup.budget
    if not budget.max_flops:
        return budget.steps or budget.estimated_steps(arm)
    probe = ctx.runs / f"probe-{arm.name}-{run_hash(ctx, arm)}"
    cached = probe.with_suffix(".json")
    if not cached.is_file():
        clear(ctx, probe)
        sh(ctx, pretrain_command(ctx, arm, 0, 3, probe, budget=False))
        if ctx.dry_run:
            return budget.estimated_steps(arm)
        last = records(probe / "metrics.jsonl")[-1]
        write_json(cached, {"flops_per_step": last["flops"] / last["step"]})
        shutil.rmtree(probe)
    return max(8, round(budget.max_flops / json.loads(cached.read_text())["flops_per_step"]))


def cross_attention(arm: Arm) -> bool:
    from polyalign.config import load_recipe

    return bool(arm.trained and load_recipe(arm.recipe).model.get("cross_attention"))


def train(ctx: SectionRun, arm: Arm, seed: int) -> Path:
    out = run_dir(ctx, arm, seed)
    if not arm.trained or (out / "done").is_file():
        return out
    if arm.continues:
        train(ctx, arm.continues, seed)
    steps = probe_steps(ctx, arm)
    command = pretrain_command(ctx, arm, seed, steps, out)
    saved = checkpoint_dirs(out)
    if not saved:
        clear(ctx, out)
        sh(ctx, command)
    elif checkpoint_step(saved[-1]) < steps:  # cut with its sitting: on from its last checkpoint
        sh(ctx, [*command, "--resume"])
    if cross_attention(arm) and not (out / "plugged-out").is_dir():  # VECO: measure the plugged-out encoder (§3.1)
        sh(ctx, [*ctx.cli, "plug-out", "--model", str(out), "--out", str(out / "plugged-out")])
    if not ctx.dry_run:
        (out / "done").write_text(f"{steps}\n")
    return out


def has_language_embeddings(model: str) -> bool:
    """Whether the model reads language ids: the models whose `pair` AER the one pair layout changed."""
    from polyalign.checkpoint import resolve_model_folder

    config = json.loads((resolve_model_folder(model) / "config.json").read_text())
    return bool(config["encoder"].get("num_languages"))


def target(ctx: SectionRun, arm: Arm, run: Path) -> Target:
    model = str(run / "plugged-out") if cross_attention(arm) else str(run if arm.trained else arm.init_from)
    embeddings = not ctx.dry_run and Path(model).exists() and has_language_embeddings(model)
    languages = ctx.section.setup.languages
    return Target(arm.name, model, run, ctx.data, ctx.eval_root, languages, ctx.python, embeddings)


def log_summary(path: Path) -> dict:
    """Every logged objective metric: mean of its first and of its last LOG_WINDOW values; the run's totals; each
    objective's loss averaged over the quarters of its logs (bench/budget.py `loss_trend` reads whether it
    flattened)."""
    recs = records(path)
    out = {}
    for k in sorted({k for r in recs for k in r if "/" in k}):
        values = [r[k] for r in recs if k in r]
        out[k] = [statistics.mean(values[:LOG_WINDOW]), statistics.mean(values[-LOG_WINDOW:])]
    totals = {key: recs[-1].get(key) for key in ("step", "flops", "seconds", "tokens")}
    # per objective, over its own logs: one that joins half way (BTMLM's stage 2) is read from where it starts
    quarters = {k.split("/")[0]: quarter_means([r[k] for r in recs if k in r]) for k in out if k.endswith("/loss")}
    quarters = {k: q for k, q in quarters.items() if q}
    return out | totals | {"steps": recs[-1].get("step")} | ({"loss_quarters": quarters} if quarters else {})


def head_warmup_summary(path: Path) -> dict:
    """The head-only steps before a run: their number, the heads' mean MLM loss over the first and the
    last LOG_WINDOW steps, and the tokens and seconds where the log carries them (older logs lack them)."""
    recs = records(path)
    losses = [statistics.mean(v for k, v in r.items() if k.endswith("/loss")) for r in recs]
    out = {
        "steps": recs[-1]["step"],
        "loss": [statistics.mean(losses[:LOG_WINDOW]), statistics.mean(losses[-LOG_WINDOW:])],
    }
    return out | {key: recs[-1][key] for key in ("tokens", "seconds") if key in recs[-1]}


def run_seed(ctx: SectionRun, arm: Arm, seed: int) -> dict:
    """Train (when the arm trains) and measure; the metrics of every finished measure, and the wall minutes of
    each measure whose jobs ran (kept in the run's minutes.json, so a cached rerun still reports them)."""
    run = train(ctx, arm, seed)
    if not ctx.dry_run:  # the folder says what it holds, beside the hash its name carries
        run.mkdir(parents=True, exist_ok=True)
        (run / KEY).write_text(run_key(ctx, arm) + "\n")
    t = target(ctx, arm, run)
    minutes_file = run / MINUTES
    minutes = json.loads(minutes_file.read_text()) if minutes_file.is_file() else {}
    out: dict = {}
    for name in ctx.section.measures_of(arm):
        measure = MEASURES[name]
        started = None
        for done, command in measure.jobs(t):
            if not (done.is_file() and measure.current(t, json.loads(done.read_text()))):
                started = started or time.time()
                sh(ctx, command)
        if started is not None and not ctx.dry_run:
            minutes[name] = round((time.time() - started) / 60, 1)
            write_json(minutes_file, minutes)
        out |= {} if ctx.dry_run else measure.read(t)
    if arm.trained and (run / "metrics.jsonl").is_file():
        out["train"] = log_summary(run / "metrics.jsonl")
    if arm.trained and (run / HEAD_WARMUP_FILE).is_file():
        out["head_warmup"] = head_warmup_summary(run / HEAD_WARMUP_FILE)
    return out | ({"minutes": minutes} if minutes else {})


def seeds_to_run(section: Section, results: dict) -> set[str]:
    """Arms that need seed 1: those of a comparison whose seed-0 difference is under its rule's `close`."""
    wanted = set()
    for c in section.comparisons:
        base = results.get(c.baseline.name, {}).get("0", {}).get(c.base_metric)
        meth = results.get(c.method.name, {}).get("0", {}).get(c.metric)
        if base is not None and meth is not None and needs_second_seed(difference([meth], [base]), c.rule.close):
            wanted |= {a.name for a in c.arms if a.trained}
    return wanted


def floors(section: Section, data: Path) -> dict[str, float]:
    """The unigram floors the section's checks name, measured on its training text (stored with the results)."""
    kinds = {c.floor for c in section.checks() if c.floor and not c.rate_key}
    if not kinds or not (data / "meta.json").is_file():
        return {}
    return {k: unigram_floor(k, data, section.setup.languages) for k in sorted(kinds)}


def run_section(ctx: SectionRun, study: str, max_seeds: int = 2, saved: Callable[[dict], None] | None = None) -> dict:
    """Seed 0 of every arm, then seed 1 of the arms the rule asks it for (`max_seeds` 1: never; their
    comparisons then read inconclusive where one seed is too close to call), and of any arm whose seed 1 already
    finished (so a `--max-seeds 1` pass over a section keeps its second seeds). `saved` gets the result so far after
    every arm (a run cut off at a deadline keeps what it measured)."""
    started, results = time.time(), {}
    for arm in ctx.section.arms:
        results[arm.name] = {"0": run_seed(ctx, arm, 0)}
        if saved is not None:
            saved(section_result(ctx, study, results, started))
    for arm in ctx.section.arms:
        wanted = max_seeds > 1 and arm.name in seeds_to_run(ctx.section, results)
        if wanted or (arm.trained and (run_dir(ctx, arm, 1) / "done").is_file()):  # a finished seed 1 stays in
            results[arm.name]["1"] = run_seed(ctx, arm, 1)
    return section_result(ctx, study, results, started)


def section_result(ctx: SectionRun, study: str, results: dict[str, dict[str, dict]], started: float) -> dict:
    setup = ctx.section.setup
    return {
        "section": ctx.section.name,
        "claims": [c.id for c in ctx.section.comparisons],
        "start": setup.start,
        "languages": list(setup.languages) if setup.languages else "all",
        "budget": setup.budget.label(),
        "data": str(ctx.data),
        "arms": {
            a.name: {"recipe": a.recipe, "overrides": list(a.overrides), "init_from": a.init_from}
            | ({"continues": a.continues.name} if a.continues else {})
            for a in ctx.section.arms
        },
        "results": results,
        "floors": {} if ctx.dry_run else floors(ctx.section, ctx.data),
        "minutes_this_call": round((time.time() - started) / 60, 1),
        "code": commit(),
        "command": f"python -m bench.run {study} {ctx.section.name}",
    }


@dataclass
class Options:
    """What a run of a study's steps is told (the command line's options)."""

    data: Path = Path("bench/work/prepared-all24")
    work: Path | None = None
    eval_root: Path = Path("../shared/data/eval")
    python: str = sys.executable
    dry_run: bool = False
    max_seeds: int = 2
    root: Path = ROOT
    device: str | None = None
    """`cuda`: run the sections sized for a GPU (skipped otherwise, and without one)."""


def section_step(study: Study, name: str, options: Options) -> None:
    """Train and measure one section of a comparison study; its result in bench/results/STUDY/sections/NAME.json."""
    section = study.sections()[name]
    if section.setup.device == "cuda" and not options.dry_run and (options.device != "cuda" or not cuda_available()):
        print(
            f"section {name} skipped: sized for a GPU (python -m bench.run {study.name} {name} --device cuda)",
            file=sys.stderr,
        )
        return
    if section.setup.start and not Path(section.setup.start).exists() and not options.dry_run:
        print(f"section {name} skipped: no start model {section.setup.start}", file=sys.stderr)
        return
    data = Path(section.setup.data) if section.setup.data else options.data
    if not (data / "dev").is_dir() and not options.dry_run:
        tokenizer = section.setup.start if section.setup.data else "../shared/models/small-base"
        prepare(data, options.eval_root, options.python, tokenizer)
    runs = (options.work or Path("bench/work") / study.name) / "runs"
    ctx = SectionRun(section, data, runs, options.eval_root, options.python, options.dry_run)
    print(f"section {name}: about {study.estimates()[name]:.0f} CPU-minutes at most", flush=True)
    result = run_section(ctx, study.name, options.max_seeds)
    if not options.dry_run:
        write_json(options.root / "bench" / "results" / study.name / "sections" / f"{name}.json", result)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def prepare(data: Path, eval_root: Path, python: str, tokenizer: str) -> None:
    """The prepared folder a study trains on: every language of ../shared/data/train with the start model's
    tokenizer (small-base's for most), the Tatoeba test sentences excluded, 1,000 pairs per language held out as
    the dev split."""
    train = ROOT.parent / "shared" / "data" / "train"
    cmd = [
        python,
        "-m",
        "polyalign.cli",
        "prepare",
        "--mono",
        str(train / "mono"),
        "--parallel",
        str(train / "parallel"),
    ]
    cmd += ["--tokenizer-from", tokenizer, "--exclude", str(eval_root / "tatoeba")]
    subprocess.run([*cmd, "--dev-pairs", "1000", "--out", str(data), "--no-progress"], check=True, cwd=ROOT)
