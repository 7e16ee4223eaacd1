"""The one runner: every study, probe, perf bench and GPU step by name, each resumable.

    python -m bench.run --list                          # every name it runs, and the retired records it draws
    python -m bench.run NAME [STEP ...] [--device cuda] [--budget S | --budget STEP=S] [--dry-run] [--out DIR]
    python -m bench.run NAME --page                     # draw NAME's page again from its JSON (bench/page.py)
    python -m bench.run NAME -- ARGS                    # a probe or pack builder given its own arguments

A study's steps are its sections (a comparison study) or its own steps and the selection's (a selection study:
bench/selection_steps.py; `--arms` picks the arms), each training and measuring its arms as below. Every (arm, seed) run
leaves a `done` marker and every measure its JSON, so a rerun only does what is missing. Runs live in WORK/runs under
a hash of what they train, so sections share the runs of the same arm. Seed 0 of every arm first; seed 1 of a
comparison's arms only when its seed-0 difference is under the rule's `close` points. Writes
bench/results/STUDY/sections/SECTION.json, which `python -m bench.run STUDY --page` turns into the page.
Any other name is a step (bench/step.py) or a call of several (the GPU check's, bench/perf/gpu_check.py): each step
runs within its budget in a process of its own, its record saved after every part into --out's record, which
bench/page.py draws; a rerun with the same --out keeps the steps that ended `ok` (`--force`: run them again).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench.arm import Arm, fill, key_text
from bench.budget import quarter_means
from bench.floors import unigram_floor
from bench.measures import MEASURES, Target
from bench.reporting import commit, read_json, records, write_json
from bench.selection_steps import selection_steps
from bench.step import Context as StepContext
from bench.studies import STUDIES
from bench.study import Section, Study
from bench.verdict import difference, needs_second_seed
from polyalign.checkpoint import checkpoint_dirs, checkpoint_step
from polyalign.train.head_warmup import HEAD_WARMUP_FILE

ROOT = Path(__file__).resolve().parents[1]
LOG_WINDOW = 10
MINUTES = "minutes.json"
KEY = "key.txt"


@dataclass
class Context:
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


def sh(ctx: Context, cmd: list[str]) -> None:
    print("+ " + " ".join(cmd), flush=True)
    if not ctx.dry_run:
        subprocess.run(cmd, check=True, cwd=ROOT)


def clear(ctx: Context, folder: Path) -> None:
    """Remove an unfinished run's folder before training it again; a dry run removes nothing (it may be printing
    the commands while that run trains)."""
    if not ctx.dry_run:
        shutil.rmtree(folder, ignore_errors=True)


def run_key(ctx: Context, arm: Arm) -> str:
    """The arm's training key and the data, as text (bench/study.py `key_text`): the same training in any section
    is the same run; any change to what is trained or measured is another."""
    return key_text((ctx.section.training_key(arm), str(ctx.data)))


def run_hash(ctx: Context, arm: Arm) -> str:
    return hashlib.sha1(run_key(ctx, arm).encode()).hexdigest()[:10]


def run_dir(ctx: Context, arm: Arm, seed: int) -> Path:
    return ctx.runs / f"{arm.name if not arm.trained else f'{arm.name}-s{seed}'}-{run_hash(ctx, arm)}"


# A run of more steps checkpoints this often, so one cut when its session ends resumes there (a long
# arm spans several sittings); 200 e5-small steps are 12-17 CPU-minutes.
SITTING_STEPS = 200


def budget_overrides(ctx: Context, steps: int) -> list[str]:
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


def pretrain_command(ctx: Context, arm: Arm, seed: int, steps: int, out: Path, budget: bool = True) -> list[str]:
    cmd = [*ctx.cli, "pretrain", arm.recipe, "--data", str(ctx.data), "--run-dir", str(out), "--no-progress"]
    start = str(run_dir(ctx, arm.continues, seed)) if arm.continues else arm.init_from
    cmd += ["--init-from", start] if start is not None else []
    cmd += ["--preset", arm.preset] if arm.preset is not None else []
    sets = [f"trainer.seed={seed}", *budget_overrides(ctx, steps), *(fill(o, steps) for o in arm.overrides)]
    if not budget:  # the FLOP probe runs 3 steps whatever the budget
        sets = [s for s in sets if not s.startswith("trainer.max_flops=")]
    return cmd + [x for s in sets for x in ("--set", s)]


def probe_steps(ctx: Context, arm: Arm) -> int:
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


def train(ctx: Context, arm: Arm, seed: int) -> Path:
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


def target(ctx: Context, arm: Arm, run: Path) -> Target:
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


def run_seed(ctx: Context, arm: Arm, seed: int) -> dict:
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


def run_section(ctx: Context, study: str, max_seeds: int = 2, saved: Callable[[dict], None] | None = None) -> dict:
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


def section_result(ctx: Context, study: str, results: dict[str, dict[str, dict]], started: float) -> dict:
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
    arms: list[str] | None = None
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
    ctx = Context(section, data, runs, options.eval_root, options.python, options.dry_run)
    print(f"section {name}: about {study.estimates()[name]:.0f} CPU-minutes at most", flush=True)
    result = run_section(ctx, study.name, options.max_seeds)
    if not options.dry_run:
        write_json(options.root / "bench" / "results" / study.name / "sections" / f"{name}.json", result)


def steps_of(study: Study, options: Options) -> dict[str, Callable[[], None]]:
    """Every step of a study in the order a run without one named takes them: a comparison study's sections, a
    selection study's own steps and the selection's (bench/selection_steps.py)."""
    if study.selection:
        return selection_steps(study, options.arms, options.dry_run, options.python, options.root)
    return {name: partial(section_step, study, name, options) for name in study.sections()}


def run_steps(study: Study, names: list[str], options: Options) -> None:
    """The named steps of a study (every one, in order, when none is named)."""
    steps = steps_of(study, options)
    if unknown := [n for n in names if n not in steps]:
        raise SystemExit(f"{', '.join(unknown)}: steps of {study.name} are {', '.join(steps)}")
    for name in names or steps:
        steps[name]()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    own = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", nargs="?", help="a study, step or call (--list shows them)")
    parser.add_argument("steps", nargs="*", help="default: every step (a section, a selection's step, a call's)")
    parser.add_argument("--list", action="store_true", help="every name this runs, and the retired records")
    parser.add_argument("--page", action="store_true", help="only draw the page again from its saved JSON")
    parser.add_argument("--dry-run", action="store_true", help="a study: print the commands; a step: tiny, on CPU")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="cuda: run a study's GPU-sized sections")
    parser.add_argument("--budget", action="append", default=[], metavar="[STEP=]SECONDS")
    parser.add_argument("--out", type=Path, help="a step's record folder (default $OUT, else bench/work/NAME)")
    parser.add_argument("--force", action="store_true", help="run again the steps the record has as ok")
    parser.add_argument("--combine", nargs="+", type=Path, help="records of several calls -> one record in --out")
    parser.add_argument("--data", type=Path, default=Options.data, help="a study's prepared data, with a dev split")
    parser.add_argument("--work", type=Path, help="a study's runs, a step's models (default: bench/work/NAME)")
    parser.add_argument("--eval", type=Path, default=Options.eval_root)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--max-seeds", type=int, choices=(1, 2), default=2, help="1: seed 0 only")
    parser.add_argument("--arms", help="a selection study's arms to train, a comma list (default: every arm)")
    for hidden in ("--child", "--logs", "--deadline"):  # a step's own process (bench/step.py run_step)
        parser.add_argument(hidden, **({"action": "store_true"} if hidden == "--child" else {}), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from bench import page, registry

    if args.list or not args.name:
        print(registry.listing({name: list(steps_of(s, Options(dry_run=True))) for name, s in STUDIES.items()}))
        return
    if args.child:
        step = registry.STEPS[args.name]
        step.run(StepContext(args.name, args.work, Path(args.logs), float(args.deadline), args.dry_run, tuple(own)))
        return
    if args.page:
        print(page.draw(args.name))
        return
    if args.name in STUDIES:
        arms = args.arms.split(",") if args.arms else None
        work = args.work
        options = Options(
            args.data, work, args.eval, args.python, args.dry_run, args.max_seeds, arms, device=args.device
        )
        run_steps(STUDIES[args.name], args.steps, options)
        return
    if args.name in registry.retired():
        raise SystemExit(f"{args.name} is retired: {registry.retired()[args.name]}")
    names = registry.CALLS.get(args.name) or (args.name,)
    if unknown := [n for n in [*names, *args.steps] if n not in registry.STEPS]:
        raise SystemExit(f"{', '.join(unknown)}: not a study, step or call (python -m bench.run --list)")
    if own:  # a probe or a pack builder with its own arguments: it writes what its arguments say
        registry.STEPS[args.name].run(StepContext(args.name, Path(tempfile.mkdtemp()), Path("."), 1e18, False, own))
        return
    out = args.out or Path(os.environ.get("OUT") or ROOT / "bench" / "work" / args.name)
    budgets = parse_budgets(args.budget, names, parser)
    run_check(args.name, out, list(args.steps or names), args.dry_run, args.work, budgets, args.force, args.combine)


def parse_budgets(given: list[str], names: tuple[str, ...], parser) -> dict[str, float]:
    """`--budget SECONDS` (the call's steps together) or `--budget STEP=SECONDS` (one step's, for this call)."""
    budgets = {}
    for text in given:
        name, _, seconds = text.rpartition("=")
        if (name and name not in names) or not seconds.replace(".", "", 1).isdigit():
            parser.error(f"--budget {text}: SECONDS or STEP=SECONDS with a step of {', '.join(names)}")
        budgets[name] = float(seconds)
    return budgets


def run_check(name, out: Path, selected: list[str], dry_run: bool, work, budgets, force=False, combine=None) -> dict:
    """The named steps in order, each within its budget and the call's total; the record saved after every step
    and drawn (bench/page.py). A record already in `out` keeps its steps that ended ok."""
    from bench import page, registry
    from bench.step import NOT_SELECTED, check_record, run_step
    from bench.step import combine as combine_records

    steps = [registry.STEPS[n] for n in registry.CALLS.get(name, (name,))]
    file = out / f"{registry.record_name(name)}.json"
    out.mkdir(parents=True, exist_ok=True)
    if combine:
        write_json(file, combine_records(combine))
        page.draw_record(file)
        return read_json(file)
    command = f"python -m bench.run {name} " + " ".join(sys.argv[2:])
    result = check_record(steps[0].title if len(steps) == 1 else "GPU check", command.strip(), steps, dry_run)
    kept = {s["name"]: s for s in read_json(file)["steps"]} if file.is_file() and not force else {}
    total = budgets.get("", registry.TOTAL_BUDGET_S.get(name, 0))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-run") as scratch:
        work = Path(work or scratch)  # models, runs and data stay out of --out, which a GPU call brings back
        for i, step in enumerate(steps):
            left = total - (time.perf_counter() - t0) if total else float("inf")
            budget = step.dry_budget_s if dry_run else min(budgets.get(step.name, step.budget_s), left)
            budget = budget if step.budget_s else 0.0  # a step without a budget runs in this process
            if kept.get(step.name, {}).get("status") == "ok":
                record = kept[step.name]
            elif step.name not in selected:
                record = {"name": step.name, "title": step.title, "status": NOT_SELECTED, "parts": {}}
            elif step.budget_s and budget < 5:
                record = {"name": step.name, "title": step.title, "status": "skipped: total budget spent", "parts": {}}
            else:
                record = run_step(step, work, out / "logs", dry_run, budget)
            result["steps"][i] = record
            result["seconds"] = time.perf_counter() - t0
            write_json(file, result)
            page.draw_record(file)
            print(f"{step.title}: {record['status']} ({record.get('seconds', 0):.0f} s)", flush=True)
    print(f"wrote {file} and {file.with_suffix('.md')}")
    return result


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


if __name__ == "__main__":
    main()
