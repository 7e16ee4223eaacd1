"""The runner's steps for a selection study (bench/study.py `Selection`), each resumable, all saving to one JSON.

    flock /tmp/polyalign-cpu.lock python -m bench.run STUDY [STEP ...] [--arms A,B] [--dry-run]

The harness's steps: `start` (the start model under the protocol, and its layer sweep), `arms` (train every arm,
a checkpoint every `save_every` steps, and measure every checkpoint), `derive` (the derived arms from the best
trained checkpoint on the dev halves), `compare` (the chosen candidate against the start: paired bootstrap). The
study's own steps run before and after them. A step skips what the JSON already holds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from bench import selection as S
from bench.reporting import commit, read_json, records
from bench.study import Arm, Study

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class SelectionRun:
    """What a step is given: the study, its saved results so far, where things are, and how to run a command."""

    study: Study
    results: dict
    root: Path = ROOT
    python: str = sys.executable
    dry_run: bool = False

    @property
    def selection(self):
        return self.study.selection

    @property
    def results_path(self) -> Path:
        return self.root / "bench" / "results" / f"{self.study.name}.json"

    def path(self, relative: str) -> Path:
        return self.root / relative

    def polyalign(self, *args: str) -> list[str]:
        return [self.python, "-m", "polyalign.cli", *args]

    def sh(self, command: list[str]) -> None:
        print("+ " + " ".join(command), flush=True)
        if not self.dry_run:
            subprocess.run(command, check=True, cwd=self.root)

    def save(self) -> None:
        """The results with the commit and time of this save and the protocol (a dry run saves nothing)."""
        if self.dry_run:
            return
        p = self.selection.protocol
        self.results["commit"] = commit()
        self.results["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        self.results["protocol"] = {"layer": p.layer, "encoding": p.encoding, "method": p.method}
        self.results_path.write_text(json.dumps(self.results, indent=1, ensure_ascii=False) + "\n")

    def chosen(self, trained_only: bool = False) -> tuple[str, str]:
        """The candidate the rule picks on the dev halves (bench/selection.py)."""
        if pick := S.chosen(self.selection, self.results, trained_only):
            return pick
        raise SystemExit(f"{self.study.name}: no candidate is measured yet (run the steps start and arms first)")

    def chosen_folder(self) -> Path:
        return self.path(S.model_path(self.selection, self.results, *self.chosen()))


# ---------------------------------------------------------------------------------------------------------
# The measure at every checkpoint: AER under the protocol, on every gold set and each of its halves


def alignment_scores(run: SelectionRun, folder: Path, encodings: tuple[str, ...], layers) -> dict:
    """AER (%) per encoding/method[/half]/layer/gold set: {"separate/argmax": {"8": {"de-en": ...}}}, and the same
    under "separate/argmax/dev" and "/test" for the halves."""
    from polyalign.align.aer import read_gold
    from polyalign.align.aligner import Aligner
    from polyalign.checkpoint import load_model
    from polyalign.evaluate.alignment import score_gold

    loaded, p = load_model(folder), run.selection.protocol
    out: dict = {}
    for encoding in encodings:
        aligner = Aligner(loaded, encoding=encoding)
        for name in run.selection.gold_sets:
            gold = read_gold(run.path(run.selection.gold) / name)
            encoded = aligner.encode_words(list(zip(gold.source, gold.target, strict=True)))
            links = aligner.align_encoded(encoded, p.methods or (p.method,), list(layers), gold.languages)
            for (method, layer), found in links.items():
                for half, rows in S.halves(len(found)).items():
                    key = f"{encoding}/{method}" + ("" if half == "all" else f"/{half}")
                    cell = out.setdefault(key, {}).setdefault(str(layer), {})
                    cell[name] = round(score_gold(subset(gold, rows), [found[i] for i in rows]).aer, 2)
    return out


def subset(gold, rows: list[int]):
    pick = lambda items: [items[i] for i in rows]  # noqa: E731
    return replace(gold, source=pick(gold.source), target=pick(gold.target), sure=pick(gold.sure),
                   possible=pick(gold.possible))  # fmt: skip


def every_encoding(p) -> tuple[str, ...]:
    return p.encodings or (p.encoding,)


def protocol_layers(run: SelectionRun) -> tuple[int, ...]:
    p = run.selection.protocol
    return tuple(dict.fromkeys((p.layer, *p.layers)))


# ---------------------------------------------------------------------------------------------------------
# The harness's steps


def start(run: SelectionRun, only=None) -> None:
    """The start model under the protocol (every encoding), and the protocol's AER at each of its layers."""
    p, folder = run.selection.protocol, run.path(run.selection.start)
    if run.dry_run:
        return
    if "start" not in run.results:
        run.results["start"] = {"scores": alignment_scores(run, folder, every_encoding(p), protocol_layers(run))}
        run.save()
    if "start_layers" not in run.results:  # the best layer, chosen on the gold sets: shown, never used
        from polyalign.checkpoint import load_model

        every = range(load_model(folder).model.config.num_layers + 1)
        run.results["start_layers"] = alignment_scores(run, folder, (p.encoding,), every)[p.key()]
        run.save()


def train_command(run: SelectionRun, arm: Arm, run_dir: Path) -> list[str]:
    """`polyalign pretrain` of one arm: the selection's schedule, a checkpoint every `save_every` steps, every one
    kept, the arm's overrides, `trainer.stop_at` where it stops early; resumed when its run exists."""
    selection = run.selection
    sets = [f"trainer.max_steps={selection.steps}", f"trainer.save_every={selection.save_every}"]
    sets += ["trainer.keep_checkpoints=0", *arm.overrides]
    sets += [f"trainer.stop_at={arm.stop_at}"] if arm.stop_at else []
    start_model = str(run.path(arm.init_from or selection.start))
    command = run.polyalign("pretrain", arm.recipe, "--data", str(run.path(selection.data)), "--init-from", start_model)
    command += ["--run-dir", str(run_dir), "--no-progress", *(a for s in sets for a in ("--set", s))]
    return command + (["--resume"] if (run_dir / "checkpoints").is_dir() else [])


def arms(run: SelectionRun, only: list[str] | None = None) -> None:
    """Train each arm (or those of `only`) to its last checkpoint and measure every checkpoint not yet measured."""
    selection = run.selection
    unknown = set(only or ()) - {a.name for a in selection.arms}
    if unknown:
        raise SystemExit(f"{', '.join(sorted(unknown))}: arms of {run.study.name} are "
                         f"{', '.join(a.name for a in selection.arms)}")  # fmt: skip
    for arm in (a for a in selection.arms if not only or a.name in only):
        run_dir, last = run.path(selection.runs) / arm.name, arm.stop_at or selection.steps
        if not (run_dir / "checkpoints" / f"step-{last:07d}").is_dir():
            run.sh(train_command(run, arm, run_dir))
        if run.dry_run:
            continue
        record = run.results.setdefault("arms", {}).setdefault(arm.name, {})
        record |= {"note": arm.note, "sets": list(arm.overrides), "recipe": arm.recipe}
        record |= {"init_from": arm.init_from} if arm.init_from not in (None, selection.start) else {}
        logged = records(run_dir / "metrics.jsonl")
        record["minutes"] = round(max((r.get("seconds", 0.0) for r in logged), default=0.0) / 60, 1)
        for checkpoint in sorted((run_dir / "checkpoints").glob("step-*")):
            step = str(int(checkpoint.name.split("-")[1]))
            record.setdefault("minutes_at", {})[step] = round(minutes_logged(logged, int(step)), 1)
            if step not in record.setdefault("checkpoints", {}):
                encodings = every_encoding(selection.protocol) if int(step) == last else (selection.protocol.encoding,)
                record["checkpoints"][step] = alignment_scores(run, checkpoint, encodings, protocol_layers(run))
                run.save()
        record["model"] = S.checkpoint_folder(selection, arm.name, last)
        run.save()


def minutes_logged(logged: list[dict], step: int) -> float:
    """Training minutes (start-up and saving excluded) when the run logged `step`."""
    return max((r["seconds"] for r in logged if r["step"] <= step), default=0.0) / 60


def derive(run: SelectionRun, only=None) -> None:
    """Each derived arm from its base's last checkpoint (the best trained candidate on the dev halves where it names
    none), written by `polyalign interpolate` or `plug-out` and measured like a checkpoint; an arm made from the same
    models is not made again, whatever its name."""
    selection, saved = run.selection, run.results.setdefault("arms", {})
    for derived in selection.derived:
        if derived.base:
            base, step = derived.base, S.last_step(saved[derived.base])
        else:
            base, step = run.chosen(trained_only=True)
        tuned, key = S.model_path(selection, run.results, base, step), S.DERIVED_KEYS[derived.kind]
        if any(r.get(key) == S.derived_source(derived, selection.start, tuned) for r in saved.values()):
            continue
        name = derived.name_for(base)
        out = f"{selection.runs}/{name}"
        run.sh(run.polyalign(*S.derive_command(derived, selection.start, tuned, out), "--overwrite"))
        if run.dry_run:
            continue
        scores = alignment_scores(run, run.path(out), (selection.protocol.encoding,), protocol_layers(run))
        minutes = S.minutes_at(saved[base], step)
        saved[name] = S.derived_record(derived, base, step, selection.start, tuned, out, scores, minutes)
        run.save()


def compare(run: SelectionRun, only=None) -> None:
    """The chosen candidate against the start on every gold set under the protocol: the AER difference with its 95%
    paired bootstrap interval over sentences (how much of a difference the set's size can tell)."""
    from polyalign.align.aer import aer_difference_interval, read_gold
    from polyalign.align.aligner import Aligner
    from polyalign.checkpoint import load_model

    if run.dry_run:
        return
    selection, p = run.selection, run.selection.protocol
    arm, step = run.chosen()
    models = (run.path(selection.start), run.chosen_folder())
    aligners = [Aligner(load_model(m), encoding=p.encoding) for m in models]
    out = {}
    for name in selection.gold_sets:
        gold = read_gold(run.path(selection.gold) / name)
        pairs = list(zip(gold.source, gold.target, strict=True))
        before, after = (a.align(pairs, p.method, p.layer, gold.languages) for a in aligners)
        difference, low, high = aer_difference_interval(before, after, gold.sure, gold.possible)
        out[name] = {"difference": round(difference, 2), "low": round(low, 2), "high": round(high, 2)}
    run.results["compare"] = {"arm": arm, "step": int(step), "sets": out}
    run.save()


HARNESS_STEPS = dict(zip(S.HARNESS_STEPS, (start, arms, derive, compare), strict=True))


def steps_of(study: Study) -> dict:
    """Every step of the study, in the order a run without a step named takes them (bench/selection.py)."""
    own = {s.name: (lambda run, only, s=s: s.run(run)) for s in (*study.selection.before, *study.selection.after)}
    return {name: HARNESS_STEPS.get(name) or own[name] for name in S.step_names(study.selection)}


def run_steps(study: Study, names: list[str], only: list[str] | None = None, dry_run: bool = False,
              python: str = sys.executable, root: Path = ROOT) -> None:  # fmt: skip
    """Run the named steps (all of them, in order, when none is named) on the study's saved results."""
    steps = steps_of(study)
    unknown = [n for n in names if n not in steps]
    if unknown:
        raise SystemExit(f"{', '.join(unknown)}: steps of {study.name} are {', '.join(steps)}")
    results = root / "bench" / "results" / f"{study.name}.json"
    run = SelectionRun(study, read_json(results) if results.is_file() else {}, root, python, dry_run)
    for name in names or list(steps):
        if dry_run and name not in HARNESS_STEPS:
            print(f"step {name}: the study's own, not run in a dry run", flush=True)
            continue
        print(f"step {name}", flush=True)
        steps[name](run, only)
