"""The one runner: every study, probe, perf bench and GPU step by name, each resumable.

    python -m bench.run --list                          # every name it runs, and the retired records it draws
    python -m bench.run NAME [STEP ...] [--device cuda] [--budget S | --budget STEP=S] [--dry-run] [--out DIR]
    python -m bench.run NAME --page                     # draw NAME's page again from its JSON (bench/page.py)
    python -m bench.run NAME -- ARGS                    # a probe or pack builder given its own arguments

A study's steps are its sections (bench/sections.py trains and measures each arm, resumable).
Any other name is a step (bench/step.py) or a call of several (the GPU check's, bench/perf/gpu_check.py): each step
runs within its budget in a process of its own, its record saved after every part into --out's record, which
bench/page.py draws; a rerun with the same --out keeps the steps that ended `ok` (`--force`: run them again).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench.reporting import read_json, write_json
from bench.sections import ROOT, Options, section_step
from bench.step import Context
from bench.studies import STUDIES
from bench.study import Study


def steps_of(study: Study, options: Options) -> dict[str, Callable[[], None]]:
    """Every step of a study in the order a run without one named takes them: its sections."""
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
    parser.add_argument("steps", nargs="*", help="default: every step (a study's section, a call's step)")
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
    for hidden in ("--child", "--logs", "--deadline"):  # a step's own process (bench/step.py run_step)
        parser.add_argument(hidden, **({"action": "store_true"} if hidden == "--child" else {}), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from bench import page, registry

    if args.list or not args.name:
        print(registry.listing({name: list(steps_of(s, Options(dry_run=True))) for name, s in STUDIES.items()}))
        return
    if args.child:
        step = registry.STEPS[args.name]
        step.run(Context(args.name, args.work, Path(args.logs), float(args.deadline), args.dry_run, tuple(own)))
        return
    if args.page:
        print(page.draw(args.name))
        return
    if args.name in STUDIES:
        options = Options(
            args.data, args.work, args.eval, args.python, args.dry_run, args.max_seeds, device=args.device
        )
        run_steps(STUDIES[args.name], args.steps, options)
        return
    if args.name in registry.retired():
        raise SystemExit(f"{args.name} is retired: {registry.retired()[args.name]}")
    names = registry.CALLS.get(args.name) or (args.name,)
    if unknown := [n for n in [*names, *args.steps] if n not in registry.STEPS]:
        raise SystemExit(f"{', '.join(unknown)}: not a study, step or call (python -m bench.run --list)")
    if own:  # a probe or a pack builder with its own arguments: it writes what its arguments say
        registry.STEPS[args.name].run(Context(args.name, Path(tempfile.mkdtemp()), Path("."), 1e18, False, own))
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


if __name__ == "__main__":
    main()
