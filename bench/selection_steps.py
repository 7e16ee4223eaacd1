"""The selection's steps (bench/study.py `Selection`), each resumable, all saving to one JSON; the GPU aligner
(bench/perf/gpu/aligner.py) declares its selection and runs them within its step's budget:

- `start`: the layer rule's sweep of the start on the dev halves, and the start under the protocol at every
  candidate layer;
- `arms`: each arm trained (a checkpoint every `save_every` steps, each kept) and every checkpoint measured;
- `derive`: the WiSE-FT interpolations from the best trained checkpoint on the dev halves.

A step skips what the JSON already holds. The e5 study, which ran them on 2 CPU cores with a `compare` step of its
own, is retired (bench/results/e5.json names the commit that holds its code).
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench import selection as S
from bench.reporting import commit, read_json, records, write_json
from bench.step import ROOT, UNFINISHED, Context, run_command
from bench.study import Candidate, Selection


@dataclass
class Run:
    """What a selection's step is given: the declaration, its saved results and their file, the step's context (its
    deadline, logs and parts)."""

    selection: Selection
    file: Path
    ctx: Context
    name: str
    root: Path = ROOT
    python: str = sys.executable
    only: list[str] | None = None
    """The arms the step `arms` trains (None: every one)."""
    copies: tuple[Path, ...] = ()
    """Where each save is also written (the GPU check's record folder)."""
    results: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.results = self.results or (read_json(self.file) if self.file.is_file() else {})

    def path(self, relative: str | Path) -> Path:
        return self.root / relative

    @property
    def device(self) -> str:
        """Where its models are scored: a GPU for a selection sized for one, where there is one (not in a dry run)."""
        if self.selection.device != "cuda" or self.ctx.dry_run:
            return "cpu"
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def sh(self, *args: str, name: str = "") -> float:
        """`polyalign ARGS` to completion within the step's deadline, its output in the step's logs; its seconds. A
        failure is recorded as the part `name` (the command's by default) and ends the step."""
        command = [self.python, "-m", "polyalign.cli", *args]
        print("+ " + " ".join(command), flush=True)
        name = name or args[0]
        status, seconds = run_command(self.ctx, name.replace(" ", "-"), command)
        if status != "ok":
            self.ctx.part(name, status=status, seconds=seconds)
            raise RuntimeError(f"{name}: {status}")
        return seconds

    def save(self) -> None:
        """The results with the commit and time of this save and the protocol."""
        p = self.selection.protocol
        self.results["commit"] = commit()
        self.results["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        self.results["protocol"] = {"layer": p.layer, "encoding": p.encoding, "method": p.method}
        for file in (self.file, *self.copies):
            write_json(file, self.results, indent=1)

    def folder(self, arm: str, step: str) -> Path:
        return self.path(S.model_path(self.selection, self.results, arm, step))


# ---------------------------------------------------------------------------------------------------------
# The measure of every candidate: AER under the protocol, on every gold set and each of its halves


def measure(run: Run, scores: dict, folder: Path, layers, methods=()) -> bool:
    """Add to a model's `scores` the cells they lack: the protocol's method (or `methods`) at `layers`, under the
    protocol's encoding; False where nothing was missing or the model's folder is gone."""
    from polyalign.checkpoint import load_model

    selection, p = run.selection, run.selection.protocol
    cells = [
        (m, k) for m in methods or (p.method,) for k in layers if str(k) not in scores.get(f"{p.encoding}/{m}", {})
    ]
    if not cells or not folder.is_dir():
        return False
    loaded = load_model(folder, device=run.device)
    named, at = (list(dict.fromkeys(cell[i] for cell in cells)) for i in (0, 1))
    new = S.gold_scores(loaded, run.path(selection.gold), selection.gold_sets, named, at, p.encoding)
    for key, by_layer in new.items():
        for layer, cell in by_layer.items():
            scores.setdefault(key, {}).setdefault(layer, cell)
    run.save()
    return True


def candidate_layers(run: Run) -> tuple[int, ...]:
    """The layers a candidate is measured at: the protocol's, and the layer rule's (the offered model is chosen among
    every checkpoint and derived arm at either)."""
    p, rule = run.selection.protocol, S.rule_layer(run.selection, run.results)
    return tuple(k for k in dict.fromkeys((p.layer, int(rule) if rule else None)) if k is not None)


# ---------------------------------------------------------------------------------------------------------
# The harness's steps


def start(run: Run) -> None:
    """The layer rule's sweep of the start on the dev halves, and the start under the protocol at every candidate
    layer."""
    selection, p = run.selection, run.selection.protocol
    folder = run.path(selection.start)
    if selection.rule_layers and "start_layers_dev" not in run.results:  # the layer rule, on the dev halves
        sweep: dict = {}
        measure(run, sweep, folder, selection.rule_layers, (p.method,))
        run.results["start_layers_dev"] = sweep[p.key(S.DEV)]
        run.save()
    measure(run, run.results.setdefault("start", {}).setdefault("scores", {}), folder, candidate_layers(run))


def train_args(run: Run, arm: Candidate, run_dir: Path) -> list[str]:
    """`polyalign pretrain` of one arm: the selection's schedule, a checkpoint every `save_every` steps, every one
    kept, the arm's overrides; resumed when its run exists."""
    selection = run.selection
    sets = [f"trainer.max_steps={selection.steps}", f"trainer.save_every={selection.save_every}"]
    sets += ["trainer.keep_checkpoints=0", *arm.overrides]
    if arm.rule_layer:  # self-trained at the layer rule's layer, which the step `start` measures
        if (layer := S.rule_layer(selection, run.results)) is None:
            raise SystemExit(f"{arm.name}: the layer rule's layer is not measured yet (run the step start first)")
        sets.append(f"objectives.0.config.layer={layer}")
    args = ["pretrain", arm.recipe, "--data", str(run.path(selection.data))]
    args += ["--init-from", str(run.path(arm.init_from or selection.start)), "--run-dir", str(run_dir)]
    args += ["--no-progress", *(a for s in sets for a in ("--set", s))]
    return args + (["--resume"] if (run_dir / "checkpoints").is_dir() else [])


def arms(run: Run) -> None:
    """Train each arm (or those of `only`) to its last checkpoint and measure every checkpoint not yet measured; an
    arm with a measured rate only when it fits the time left (`unaffordable`)."""
    selection = run.selection
    if unknown := set(run.only or ()) - {a.name for a in selection.arms}:
        raise SystemExit(f"{', '.join(sorted(unknown))}: arms of {run.name} are "
                         f"{', '.join(a.name for a in selection.arms)}")  # fmt: skip
    for arm in (a for a in selection.arms if not run.only or a.name in run.only):
        run_dir, part, seconds = run.path(selection.runs) / arm.name, f"train {arm.name}", 0.0
        finished_before = (run_dir / "checkpoints" / f"step-{selection.steps:07d}").is_dir()  # its last saved
        if not finished_before and (reason := unaffordable(arm, selection, run_dir, run.ctx.left())):
            run.ctx.part(part, status=f"skipped: not run, {reason}")
            run.results.setdefault("arms", {})[arm.name] = {"note": arm.note, "not_run": reason}
            run.save()
            continue
        if not finished_before:
            if not (run_dir / "checkpoints").is_dir():  # cut before its first checkpoint: started again
                shutil.rmtree(run_dir, ignore_errors=True)
            run.ctx.part(part, status=UNFINISHED)
            seconds = run.sh(*train_args(run, arm, run_dir), name=part)
        record = run.results.setdefault("arms", {}).setdefault(arm.name, {})
        record.pop("not_run", None)
        record |= {"note": arm.note, "sets": list(arm.overrides), "recipe": arm.recipe}
        record |= {"init_from": arm.init_from} if arm.init_from not in (None, selection.start) else {}
        layers = candidate_layers(run)
        record |= {"layers": sorted(layers)}
        logged = records(run_dir / "metrics.jsonl")
        record["minutes"] = round(max((r.get("seconds", 0.0) for r in logged), default=0.0) / 60, 1)
        checkpoints = sorted((run_dir / "checkpoints").glob("step-*"))
        last = int(checkpoints[-1].name.split("-")[1])
        for checkpoint in checkpoints:
            step = str(int(checkpoint.name.split("-")[1]))
            record.setdefault("minutes_at", {})[step] = round(minutes_logged(logged, int(step)), 1)
            measure(run, record.setdefault("checkpoints", {}).setdefault(step, {}), checkpoint, layers)
        record["model"] = S.checkpoint_folder(selection, arm.name, last)
        run.save()
        run.ctx.part(part, status="ok", steps=last, max_steps=selection.steps, minutes=record["minutes"],
                     seconds=seconds, finished_before=finished_before)  # fmt: skip


def unaffordable(arm: Candidate, selection: Selection, run_dir: Path, left: float) -> str | None:
    """Why an arm with a measured rate is not run in this call (None: it runs): it runs only when its schedule and
    its scores (`reserve_s`) fit the seconds left, or when an earlier call started it."""
    if not arm.steps_per_minute or (run_dir / "checkpoints").is_dir():
        return None
    steps = selection.steps
    if (needed := 60 * steps / arm.steps_per_minute + selection.reserve_s) <= left:
        return None
    rate = f"{steps:,} steps at {arm.steps_per_minute:,g} a minute"
    return f"{rate} and their scores need {needed:.0f} s, {left:.0f} s left"


def minutes_logged(logged: list[dict], step: int) -> float:
    """Training minutes (start-up and saving excluded) when the run logged `step`."""
    return max((r["seconds"] for r in logged if r["step"] <= step), default=0.0) / 60


def derive(run: Run) -> None:
    """Each derived arm from the best trained checkpoint on the dev halves (of its base arm where it names one),
    written by `polyalign interpolate` and measured like a checkpoint; an arm made from the same models is not made
    again, whatever its name."""
    selection, saved = run.selection, run.results.setdefault("arms", {})
    for derived in selection.derived:
        if not (pick := S.derivation_base(selection, run.results, derived.base)):
            if derived.base:  # its base arm was not run
                continue
            raise SystemExit(f"{run.name}: no trained checkpoint is measured yet (run the step arms first)")
        base, step = pick
        tuned, key = S.model_path(selection, run.results, base, step), S.INTERPOLATED
        layers = candidate_layers(run)
        made = [r for r in saved.values() if r.get(key) == S.derived_source(derived, selection.start, tuned)]
        for record in made:  # made before: measured at a layer it lacks where its folder is still here
            if measure(run, record["checkpoints"][step], run.path(record["model"]), layers):
                record["layers"] = sorted({*record.get("layers", ()), *layers})
                run.save()
        if made:
            continue
        name = derived.name_for(base)
        out = f"{selection.runs}/{name}"
        run.sh(*S.derive_command(derived, selection.start, tuned, out), "--overwrite", name=f"derive {name}")
        scores: dict = {}
        measure(run, scores, run.path(out), layers)
        minutes = S.minutes_at(saved[base], step)
        saved[name] = S.derived_record(derived, base, step, selection.start, tuned, out, scores, minutes)
        saved[name] |= {"layers": list(layers)}
        run.save()
