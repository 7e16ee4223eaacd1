"""Train and measure one section of bench/evidence/claims.py through the polyalign CLI; resumable.

Usage: python -m bench.evidence.run SECTION --data PREPARED [--work bench/work/evidence] [--out DIR] [--dry-run]
Every (arm, seed) run leaves a `done` marker and every measure its JSON, so a rerun only does what is missing.
The start model is measured once per section. Seed 0 of every arm first; seed 1 of a claim's arms only when
its difference after seed 0 is under the claim's `close` points (issue 19). Writes OUT/SECTION.json, which
bench/evidence/write.py turns into bench/results/evidence.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.evidence.claims import (
    ONE_CLASS,
    ONE_PAIR_LAYOUT,
    RELEASED_FILTERING,
    Arm,
    Claim,
    Section,
    estimates,
    fill,
    gold_sets_for,
    sections,
)
from bench.evidence.verdict import difference, needs_second_seed
from bench.reporting import commit, records, write_json
from polyalign.align.aligner import PAIR_LAYOUT
from polyalign.align.extract import OT_FILTERING

ROOT = Path(__file__).resolve().parents[2]
MT_STEPS = 60  # translation fine-tuning steps (bench/veco.sh used 40 before issue 19; 60: a 3-point loss curve)
LOG_WINDOW = 10


@dataclass
class Context:
    section: Section
    data: Path
    """Prepared folder (`polyalign prepare ... --dev-pairs 1000`)."""
    work: Path
    """This section's folder (WORK/SECTION); its runs and their evaluations live in WORK/runs, shared by every
    section (see `run_dir`)."""
    eval_root: Path
    python: str
    dry_run: bool = False

    @property
    def runs(self) -> Path:
        return self.work.parent / "runs"

    @property
    def cli(self) -> list[str]:
        return [self.python, "-m", "polyalign.cli"]


def sh(ctx: Context, cmd: list[str]) -> None:
    print("+ " + " ".join(cmd), flush=True)
    if not ctx.dry_run:
        subprocess.run(cmd, check=True, cwd=ROOT)


# --------------------------------------------------------------------------------------------------------
# Training


def run_key(ctx: Context, arm: Arm) -> str:
    """A short hash of the arm's training key (claims.Section.training_key) and the prepared data: equal for the
    same training in any section, different for any change that would train or measure something else."""
    key = repr((ctx.section.training_key(arm), str(ctx.data)))
    return hashlib.sha1(key.encode()).hexdigest()[:10]


def run_dir(ctx: Context, arm: Arm, seed: int) -> Path:
    """The run (and its eval/ folder) of one arm and seed, shared by every section that trains the same arm."""
    name = arm.name if not arm.trained else f"{arm.name}-s{seed}"
    return ctx.runs / f"{name}-{run_key(ctx, arm)}"


def model_of(arm: Arm) -> str:
    return str(arm.init_from)


def budget_overrides(claim: Claim, steps: int) -> list[str]:
    sets = [f"trainer.max_steps={steps}", f"trainer.warmup_steps={max(1, steps // 10)}", f"trainer.save_every={steps}"]
    sets.append(f"trainer.log_every={max(1, steps // 60)}")
    if claim.budget.max_flops:
        sets.append(f"trainer.max_flops={claim.budget.max_flops:g}")
    if claim.languages:
        sets.append(f"data.languages=[{','.join(claim.languages)}]")
    return sets


def pretrain_command(ctx: Context, arm: Arm, seed: int, steps: int, out: Path) -> list[str]:
    cmd = [*ctx.cli, "pretrain", arm.recipe, "--data", str(ctx.data), "--run-dir", str(out), "--no-progress"]
    if arm.init_from is not None:
        cmd += ["--init-from", arm.init_from]
    if arm.preset is not None:
        cmd += ["--preset", arm.preset]
    sets = [
        f"trainer.seed={seed}",
        *budget_overrides(ctx.section.first, steps),
        *(fill(o, steps) for o in arm.overrides),
    ]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def probe_steps(ctx: Context, arm: Arm) -> int:
    """Steps that spend the FLOP budget: the budget over the mean FLOPs of a 3-step probe (as bench/xlm-e.sh)."""
    budget = ctx.section.first.budget
    if budget.steps:
        return budget.steps
    probe = ctx.runs / f"probe-{arm.name}-{run_key(ctx, arm)}"
    cached = probe.with_suffix(".json")
    if not cached.is_file():
        shutil.rmtree(probe, ignore_errors=True)
        sh(ctx, _drop_flops(pretrain_command(ctx, arm, 0, 3, probe)))
        if ctx.dry_run:
            return budget.estimated_steps(arm)
        last = records(probe / "metrics.jsonl")[-1]
        write_json(cached, {"flops_per_step": last["flops"] / last["step"]})
        shutil.rmtree(probe)
    per_step = json.loads(cached.read_text())["flops_per_step"]
    return max(8, round(budget.max_flops / per_step))


def _drop_flops(cmd: list[str]) -> list[str]:
    """The probe runs 3 steps whatever the budget: no `--set trainer.max_flops=...` pair."""
    out: list[str] = []
    for c in cmd:
        if c.startswith("trainer.max_flops=") and out and out[-1] == "--set":
            out.pop()
            continue
        out.append(c)
    return out


def train(ctx: Context, arm: Arm, seed: int) -> Path:
    out = run_dir(ctx, arm, seed)
    if not arm.trained or (out / "done").is_file():
        return out
    shutil.rmtree(out, ignore_errors=True)
    steps = probe_steps(ctx, arm)
    sh(ctx, pretrain_command(ctx, arm, seed, steps, out))
    if cross_attention(arm):  # VECO: evaluate the plugged-out encoder (§3.1), as bench/veco.sh did
        sh(ctx, [*ctx.cli, "plug-out", "--model", str(out), "--out", str(out / "plugged-out")])
    if not ctx.dry_run:
        (out / "done").write_text(f"{steps}\n")
    return out


def cross_attention(arm: Arm) -> bool:
    from polyalign.config import load_recipe

    return bool(arm.trained and load_recipe(arm.recipe).model.get("cross_attention"))


# --------------------------------------------------------------------------------------------------------
# Measures: one CLI call (or bench script) per measure, skipped when its JSON is there


def dev_languages(ctx: Context) -> str:
    langs = ctx.section.first.languages
    return "all" if langs is None else ",".join(x for x in langs if x != "en")


def encoder_of(arm: Arm, run: Path) -> str:
    """The model a measure reads: the start model for an untrained arm, VECO's plugged-out encoder, the run."""
    return str(run / "plugged-out") if cross_attention(arm) else str(run if arm.trained else model_of(arm))


def has_language_embeddings(model: str) -> bool:
    """Whether the model reads language ids: the models whose `pair` AER the one pair layout changed (a model
    without them was always laid out with positions running on)."""
    from polyalign.checkpoint import resolve_model_folder

    config = json.loads((resolve_model_folder(model) / "config.json").read_text())
    return bool(config["encoder"].get("num_languages"))


def commands(ctx: Context, arm: Arm, run: Path, name: str) -> list[tuple[Path, list[str]]]:
    """The (JSON it writes, command) pairs of one measure."""
    evals = run / "eval"
    encoder = encoder_of(arm, run)
    cli = ctx.cli
    if name == "retrieval":
        return [
            (
                evals / split / "tatoeba.json",
                [*cli, "evaluate", "tatoeba", "--model", encoder, "--data", str(data), "--langs", langs]
                + ["--layers", "all", "--out", str(evals / split), "--no-progress"],
            )
            for split, data, langs in (
                ("dev", ctx.data / "dev", dev_languages(ctx)),
                ("test", ctx.eval_root / "tatoeba", "tatoeba14"),
            )
        ]
    if name.startswith("aer-"):
        gold_root = ctx.eval_root / "word_alignment"
        return [
            (
                evals / name / gold / "alignment.json",
                [*cli, "evaluate", "alignment", "--model", encoder, "--gold", str(gold_root / gold)]
                + ["--method", name.removeprefix("aer-"), "--encoding", "pair", "--layers", "all"]
                + ["--out", str(evals / name / gold), "--no-progress"],
            )
            for gold in gold_sets_for(ctx.section.first.languages)
        ]
    if name == "xnli":
        smoke = ["--seeds", "1", "--max-train", "2000", "--max-select", "100", "--max-eval", "100", "--set", "epochs=1"]
        return [
            (
                evals / "xnli" / "finetune.json",
                [*cli, "finetune", "xnli", "--model", encoder, "--data", str(ctx.eval_root), *smoke]
                + ["--out", str(evals / "xnli"), "--no-progress"],
            )
        ]
    if name == "pseudo":
        return [
            (
                evals / "pseudo.json",
                [ctx.python, "bench/ernie_m_pseudo_tokens.py", "--data", str(ctx.data / "dev")]
                + ["--langs", dev_languages(ctx), "--max-pairs", "100", "--out", str(evals / "pseudo.json")]
                + ["--model", f"{arm.name}={encoder}"],
            )
        ]
    if name.startswith("mt-"):
        return [
            (
                evals / f"{name}.json",
                [ctx.python, "bench/veco_translation.py", "--model", str(run), "--init", name.removeprefix("mt-")]
                + ["--pair", "de-en", "--steps", str(MT_STEPS), "--test-size", "200", "--tatoeba-size", "0"]
                + ["--out", str(evals / f"{name}.json")],
            )
        ]
    raise ValueError(f"unknown measure {name!r}")


def measured(done: Path, name: str, language_embeddings: bool = False) -> bool:
    """The measure's JSON is there, an OT evaluation in it used today's filtering (one without the tag predates
    the released Itermax procedure), and an AER of a model with language embeddings was laid out as every
    model's is (one without the tag restarted positions at the second sentence): stale ones are measured
    again."""
    if not done.is_file():
        return False
    if not name.startswith("aer-"):
        return True
    result = json.loads(done.read_text())
    if name == "aer-ot" and result.get("ot_filtering") != OT_FILTERING:
        return False
    return not language_embeddings or result.get("pair_layout") == PAIR_LAYOUT


def measure(ctx: Context, arm: Arm, run: Path, name: str) -> None:
    """Run the measure's commands whose JSON is not there yet (or is stale: `measured`)."""
    embeddings = name.startswith("aer-") and not ctx.dry_run and has_language_embeddings(encoder_of(arm, run))
    for done, command in commands(ctx, arm, run, name):
        if not measured(done, name, embeddings):
            sh(ctx, command)


# --------------------------------------------------------------------------------------------------------
# Reading the measures back (pure functions of the JSON files)


def best_layer(dev: dict) -> int:
    """The layer with the best dev retrieval (both directions): the protocol's layer choice, never the test's."""
    return max(dev["sweep"], key=lambda r: r["average"]["both"])["layer"]


def retrieval_metrics(dev: dict, test: dict) -> dict:
    by_layer = {r["layer"]: r["average"]["both"] for r in test["sweep"]}
    layer = best_layer(dev)
    return {
        "tatoeba14@dev": by_layer[layer],
        "tatoeba14@last": by_layer[max(by_layer)],
        "tatoeba14@default": by_layer[test["reported"]["layer"]],
        "dev@best": max(r["average"]["both"] for r in dev["sweep"]),
        "layer@dev": layer,
        "sweep/tatoeba14": [by_layer[k] for k in sorted(by_layer)],
    }


def aer_metrics(method: str, per_gold: dict[str, dict], language_embeddings: bool = False) -> dict:
    """Means over the gold sets: at the evaluator's default layer, at the best layer of the mean sweep, and at
    DWA's self-labeling layer round(10 L / 12) (XLM-Align Table 11 scaled to the depth L). `language_embeddings`:
    the model has them (see ONE_PAIR_LAYOUT)."""
    golds = list(per_gold.values())
    sweep = [statistics.mean(g["sweep"][i]["aer"] for g in golds) for i in range(len(golds[0]["sweep"]))]
    depth = len(sweep) - 1
    out = {
        f"aer-{method}@default": statistics.mean(g["aer"] for g in golds),
        f"aer-{method}@best": min(sweep),
        f"sweep/aer-{method}": sweep,
        f"per-gold/aer-{method}": {name: g["aer"] for name, g in per_gold.items()},
    }
    if method == "ot":
        out["aer-ot@label"] = sweep[round(10 * depth / 12)]
        # evaluations from before the released Itermax filtering (polyalign/align/extract.py) carry no tag
        out[RELEASED_FILTERING] = all(g.get("ot_filtering") == OT_FILTERING for g in golds)
    out[ONE_PAIR_LAYOUT] = not language_embeddings or all(g.get("pair_layout") == PAIR_LAYOUT for g in golds)
    return out


def log_summary(path: Path) -> dict:
    """Every logged objective metric: mean of its first and of its last LOG_WINDOW values; the run's totals."""
    recs = records(path)
    keys = sorted({k for r in recs for k in r if "/" in k})
    out = {}
    for k in keys:
        values = [r[k] for r in recs if k in r]
        out[k] = [statistics.mean(values[:LOG_WINDOW]), statistics.mean(values[-LOG_WINDOW:])]
    last = recs[-1]
    out |= {"steps": last.get("step"), "flops": last.get("flops"), "seconds": last.get("seconds")}
    return out


def read_measures(arm: Arm, run: Path, measures: list[str], languages) -> dict:
    """The metrics of every finished measure (a missing one is left out, never guessed)."""
    evals = run / "eval"
    out: dict = {}
    load = lambda p: json.loads(p.read_text()) if p.is_file() else None  # noqa: E731
    for name in measures:
        if name == "retrieval":
            dev, test = load(evals / "dev" / "tatoeba.json"), load(evals / "test" / "tatoeba.json")
            if dev and test:
                out |= retrieval_metrics(dev, test)
        elif name.startswith("aer-"):
            golds = {g: load(evals / name / g / "alignment.json") for g in gold_sets_for(languages)}
            if golds and all(golds.values()):
                embeddings = has_language_embeddings(encoder_of(arm, run))
                out |= aer_metrics(name.removeprefix("aer-"), golds, embeddings)
        elif name == "xnli" and (data := load(evals / "xnli" / "finetune.json")):
            out["xnli"] = data["results"][0]["average"]["mean"]
            # The test rows are the same in every language: one accuracy everywhere is a classifier that
            # ignores its input (it predicts one class), whatever that accuracy is.
            per_language = [v["mean"] for v in data["results"][0]["per_language"].values()]
            out[ONE_CLASS] = len(per_language) > 1 and len(set(per_language)) == 1
        elif name == "pseudo" and (data := load(evals / "pseudo.json")):
            result = data["results"][arm.name]
            out |= {"pseudo": 100 * result["precision"], "pseudo-copy": 100 * result["copy_precision"]}
        elif name.startswith("mt-") and (data := load(evals / f"{name}.json")):
            out |= {
                f"{name}-loss": data["heldout_loss"],
                f"{name}-bleu": data["heldout"]["bleu"],
                f"curve/{name}": data["train_curve"],
            }
    if arm.trained and (run / "metrics.jsonl").is_file():
        out["train"] = log_summary(run / "metrics.jsonl")
    return out


# --------------------------------------------------------------------------------------------------------
# The section


def seeds_to_run(section: Section, results: dict) -> set[str]:
    """Arms that need seed 1: those of a claim whose seed-0 difference is under its `close` points."""
    wanted = set()
    for claim in section.claims:
        base = results.get(claim.baseline.name, {}).get("0", {}).get(claim.baseline_metric or claim.metric)
        meth = results.get(claim.method.name, {}).get("0", {}).get(claim.metric)
        if base is None or meth is None:
            continue
        if needs_second_seed(difference([meth], [base]), claim.close):
            wanted |= {a.name for a in claim.arms if a.trained}
    return wanted


def run_seed(ctx: Context, arm: Arm, seed: int) -> dict:
    run = train(ctx, arm, seed)
    names = ctx.section.measures_of(arm)
    for name in names:
        measure(ctx, arm, run, name)
    return {} if ctx.dry_run else read_measures(arm, run, names, ctx.section.first.languages)


def run_section(ctx: Context) -> dict:
    started = time.time()
    results: dict[str, dict[str, dict]] = {}
    for arm in ctx.section.arms:
        results[arm.name] = {"0": run_seed(ctx, arm, 0)}
    for arm in ctx.section.arms:
        if arm.name in seeds_to_run(ctx.section, results):
            results[arm.name]["1"] = run_seed(ctx, arm, 1)
    first = ctx.section.first
    return {
        "section": ctx.section.name,
        "claims": [c.id for c in ctx.section.claims],
        "start": first.start,
        "languages": list(first.languages) if first.languages else "all",
        "gold_sets": gold_sets_for(first.languages),
        "budget": first.budget.label(),
        "data": str(ctx.data),
        "arms": {
            a.name: {"recipe": a.recipe, "overrides": list(a.overrides), "init_from": a.init_from, "preset": a.preset}
            for a in ctx.section.arms
        },
        "results": results,
        "estimated_minutes": round(estimates()[ctx.section.name], 1),
        "minutes_this_call": round((time.time() - started) / 60, 1),
        "code": commit(),
        "command": "bench/evidence.sh " + ctx.section.name,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("section", choices=list(sections()))
    parser.add_argument("--data", type=Path, required=True, help="prepared folder with a dev split")
    parser.add_argument("--work", type=Path, default=Path("bench/work/evidence"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/evidence/sections"))
    parser.add_argument("--eval", type=Path, default=Path("../shared/data/eval"))
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--dry-run", action="store_true", help="print the commands of a fresh run, run nothing")
    args = parser.parse_args(argv)
    if not (args.data / "dev").is_dir():
        sys.exit(f"{args.data}/dev: no dev split; prepare with --dev-pairs 1000")
    section = sections()[args.section]
    if section.first.start and not Path(section.first.start).exists():
        print(f"section {section.name} skipped: no start model {section.first.start}", file=sys.stderr)
        sys.exit(3)  # bench/evidence.sh goes on with the next section
    ctx = Context(section, args.data, args.work / args.section, args.eval, args.python, args.dry_run)
    if not args.dry_run:
        ctx.runs.mkdir(parents=True, exist_ok=True)
    print(
        f"section {section.name}: about {estimates()[section.name]:.0f} CPU-minutes at most after the sections "
        f"before it (alone {section.estimated_minutes():.0f})",
        flush=True,
    )
    result = run_section(ctx)
    if not args.dry_run:
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(args.out / f"{section.name}.json", result)


if __name__ == "__main__":
    main()
