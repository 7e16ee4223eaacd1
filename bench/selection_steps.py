"""A selection study's steps (bench/study.py `Selection`) on the one step interface (bench/step.py), each resumable,
all saving to one JSON; the study's own steps run before and after the harness's:

- `start`: the layer rule's sweep of the start on the dev halves, the start under the protocol at every candidate
  layer, and its AER at every layer (shown on the page, never used);
- `arms`: each arm trained (a checkpoint every `save_every` steps, each kept) and every checkpoint measured;
- `derive`: the derived arms (WiSE-FT, plug-out) from the best trained checkpoint on the dev halves;
- `compare`: the offered aligner against the start, with a paired bootstrap interval.

    flock /tmp/polyalign-cpu.lock python -m bench.run STUDY [STEP ...] [--arms A,B] [--dry-run]

A step skips what the JSON already holds. The GPU check's aligner (bench/perf/gpu/aligner.py) declares a selection of
its own and runs `start`, `arms` and `derive` within its step's budget.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench import selection as S
from bench.reporting import commit, read_json, records
from bench.step import ROOT, UNFINISHED, Context, Step, run_command
from bench.study import Candidate, Selection, Study


@dataclass
class Run:
    """What a selection's step is given: the declaration, its saved results and their file, the step's context (its
    deadline, logs and parts); `print_only`: print the commands, run and save nothing (a study's --dry-run)."""

    selection: Selection
    file: Path
    ctx: Context
    name: str
    root: Path = ROOT
    python: str = sys.executable
    print_only: bool = False
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
        if self.print_only:
            return 0.0
        name = name or args[0]
        status, seconds = run_command(self.ctx, name.replace(" ", "-"), command)
        if status != "ok":
            self.ctx.part(name, status=status, seconds=seconds)
            raise RuntimeError(f"{name}: {status}")
        return seconds

    def save(self) -> None:
        """The results with the commit and time of this save and the protocol (printing only: nothing)."""
        if self.print_only:
            return
        p = self.selection.protocol
        self.results["commit"] = commit()
        self.results["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        self.results["protocol"] = {"layer": p.layer, "encoding": p.encoding, "method": p.method}
        text = json.dumps(self.results, indent=1, ensure_ascii=False, default=str) + "\n"
        for file in (self.file, *self.copies):
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(text)

    def offered(self) -> dict:
        """The offered aligner: the chosen candidate, its layer and method (bench/selection.py `offered`)."""
        if pick := S.offered(self.selection, self.results):
            return pick
        raise SystemExit(f"{self.name}: no candidate is measured yet (run the steps start and arms first)")

    def folder(self, arm: str, step: str) -> Path:
        return self.path(S.model_path(self.selection, self.results, arm, step))

    def chosen_folder(self) -> Path:
        pick = self.offered()
        return self.folder(pick["arm"], pick["step"])


# ---------------------------------------------------------------------------------------------------------
# The measure of every candidate: AER under the protocol, on every gold set and each of its halves


def measure(run: Run, scores: dict, folder: Path, layers, methods=(), encodings=()) -> bool:
    """Add to a model's `scores` the cells they lack: every method of the protocol (or `methods`) at `layers`, under
    the protocol's encoding (or `encodings`); False where nothing was missing or the model's folder is gone."""
    from polyalign.checkpoint import load_model

    selection, p = run.selection, run.selection.protocol
    methods = methods or p.methods or (p.method,)
    wanted = {e: [(m, k) for m in methods for k in layers if str(k) not in scores.get(f"{e}/{m}", {})]
              for e in encodings or (p.encoding,)}  # fmt: skip
    if not any(wanted.values()) or not folder.is_dir():
        return False
    loaded = load_model(folder, device=run.device)
    for encoding, cells in ((e, c) for e, c in wanted.items() if c):
        named, at = (list(dict.fromkeys(cell[i] for cell in cells)) for i in (0, 1))
        new = S.gold_scores(loaded, run.path(selection.gold), selection.gold_sets, named, at, encoding)
        for key, by_layer in new.items():
            for layer, cell in by_layer.items():
                scores.setdefault(key, {}).setdefault(layer, cell)
    run.save()
    return True


def every_encoding(p) -> tuple[str, ...]:
    return p.encodings or (p.encoding,)


def candidate_layers(run: Run, rule_layer: bool = True) -> tuple[int, ...]:
    """The layers a candidate is measured at: the protocol's, and the layer rule's (the offered model is chosen among
    every checkpoint and derived arm at either); `rule_layer=False`: the protocol's only."""
    p, rule = run.selection.protocol, S.rule_layer(run.selection, run.results)
    chosen_at = (p.layer, *p.layers, *([int(rule)] if rule_layer and rule else []))
    return tuple(k for k in dict.fromkeys(chosen_at) if k is not None)


# ---------------------------------------------------------------------------------------------------------
# The harness's steps


def start(run: Run) -> None:
    """The layer rule's sweep of the start on the dev halves, the start under the protocol (every encoding at the
    protocol's layers, every method at the rule's too), and its AER at every layer (shown, never used)."""
    selection, p = run.selection, run.selection.protocol
    folder = run.path(selection.start)
    if run.print_only:
        return
    if selection.rule_layers and "start_layers_dev" not in run.results:  # the layer rule, on the dev halves
        sweep: dict = {}
        measure(run, sweep, folder, selection.rule_layers, (p.method,))
        run.results["start_layers_dev"] = sweep[p.key(S.DEV)]
        run.save()
    scores = run.results.setdefault("start", {}).setdefault("scores", {})
    measure(run, scores, folder, candidate_layers(run, rule_layer=False), encodings=every_encoding(p))
    measure(run, scores, folder, candidate_layers(run))
    if selection.start_sweep and "start_layers" not in run.results:  # the best layer, chosen on the gold sets
        from polyalign.checkpoint import load_model

        sweep = {}
        measure(run, sweep, folder, range(load_model(folder).model.config.num_layers + 1), (p.method,))
        run.results["start_layers"] = sweep[p.key()]
        run.save()


def train_args(run: Run, arm: Candidate, run_dir: Path) -> list[str]:
    """`polyalign pretrain` of one arm: the selection's schedule, a checkpoint every `save_every` steps, every one
    kept, the arm's overrides, `trainer.stop_at` where it stops early; resumed when its run exists."""
    selection = run.selection
    sets = [f"trainer.max_steps={selection.steps}", f"trainer.save_every={selection.save_every}"]
    sets += ["trainer.keep_checkpoints=0", *arm.overrides]
    sets += [f"trainer.stop_at={arm.stop_at}"] if arm.stop_at else []
    sets += [f"trainer.max_minutes={arm.minutes:g}", "trainer.stop_at=0"] if arm.minutes else []
    if arm.rule_layer:  # self-trained at the layer rule's layer, which the step `start` measures
        layer = S.rule_layer(selection, run.results)
        if layer is None and not run.print_only:
            raise SystemExit(f"{arm.name}: the layer rule's layer is not measured yet (run the step start first)")
        sets.append(f"objectives.0.config.layer={layer or 'RULE_LAYER'}")
    args = ["pretrain", arm.recipe, "--data", str(run.path(selection.data))]
    args += ["--init-from", str(run.path(arm.init_from or selection.start)), "--run-dir", str(run_dir)]
    args += ["--no-progress", *(a for s in sets for a in ("--set", s))]
    return args + (["--resume"] if (run_dir / "checkpoints").is_dir() else [])


def arms(run: Run) -> None:
    """Train each arm (or those of `only`) to its last checkpoint and measure every checkpoint not yet measured; an
    arm with a measured rate only when it fits the time left (`unaffordable`)."""
    selection, p = run.selection, run.selection.protocol
    if unknown := set(run.only or ()) - {a.name for a in selection.arms}:
        raise SystemExit(f"{', '.join(sorted(unknown))}: arms of {run.name} are "
                         f"{', '.join(a.name for a in selection.arms)}")  # fmt: skip
    for arm in (a for a in selection.arms if not run.only or a.name in run.only):
        run_dir, part, seconds = run.path(selection.runs) / arm.name, f"train {arm.name}", 0.0
        finished_before = trained(arm, run_dir, selection.steps)
        if not finished_before and (reason := unaffordable(arm, selection, run_dir, run.ctx.left())):
            run.ctx.part(part, status=f"skipped: not run, {reason}")
            run.results.setdefault("arms", {})[arm.name] = {"note": arm.note, "not_run": reason}
            run.save()
            continue
        if not finished_before:
            if not run.print_only:
                if not (run_dir / "checkpoints").is_dir():  # cut before its first checkpoint: started again
                    shutil.rmtree(run_dir, ignore_errors=True)
                run.ctx.part(part, status=UNFINISHED)
            seconds = run.sh(*train_args(run, arm, run_dir), name=part)
        if run.print_only:
            continue
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
            scores = record.setdefault("checkpoints", {}).setdefault(step, {})
            every = not scores and int(step) == last and not arm.rule_layer  # a rule-layer arm: its encoding only
            measure(run, scores, checkpoint, layers, encodings=every_encoding(p) if every else ())
        record["model"] = S.checkpoint_folder(selection, arm.name, last)
        run.save()
        run.ctx.part(part, status="ok", steps=last, max_steps=selection.steps, minutes=record["minutes"],
                     seconds=seconds, finished_before=finished_before)  # fmt: skip


def trained(arm: Candidate, run_dir: Path, steps: int) -> bool:
    """An arm's run is done: its last checkpoint is saved, or (a minutes arm) its training minutes are spent."""
    if arm.minutes:
        logged = records(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").is_file() else []
        seconds = max((r.get("seconds", 0.0) for r in logged), default=0.0)
        return (run_dir / "checkpoints").is_dir() and seconds >= 0.99 * arm.minutes * 60
    return (run_dir / "checkpoints" / f"step-{arm.stop_at or steps:07d}").is_dir()


def unaffordable(arm: Candidate, selection: Selection, run_dir: Path, left: float) -> str | None:
    """Why an arm with a measured rate is not run in this call (None: it runs): it runs only when its schedule and
    its scores (`reserve_s`) fit the seconds left, or when an earlier call started it."""
    if not arm.steps_per_minute or (run_dir / "checkpoints").is_dir():
        return None
    steps = arm.stop_at or selection.steps
    if (needed := 60 * steps / arm.steps_per_minute + selection.reserve_s) <= left:
        return None
    rate = f"{steps:,} steps at {arm.steps_per_minute:,g} a minute"
    return f"{rate} and their scores need {needed:.0f} s, {left:.0f} s left"


def minutes_logged(logged: list[dict], step: int) -> float:
    """Training minutes (start-up and saving excluded) when the run logged `step`."""
    return max((r["seconds"] for r in logged if r["step"] <= step), default=0.0) / 60


def derive(run: Run) -> None:
    """Each derived arm from the best trained checkpoint on the dev halves (of its base arm where it names one),
    written by `polyalign interpolate` or `plug-out` and measured like a checkpoint; an arm made from the same models
    is not made again, whatever its name."""
    selection, saved = run.selection, run.results.setdefault("arms", {})
    for derived in selection.derived:
        if not (pick := S.derivation_base(selection, run.results, derived.base)):
            if derived.base:  # its base arm was not run
                continue
            raise SystemExit(f"{run.name}: no trained checkpoint is measured yet (run the step arms first)")
        base, step = pick
        tuned, key = S.model_path(selection, run.results, base, step), S.DERIVED_KEYS[derived.kind]
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
        if run.print_only:
            continue
        scores: dict = {}
        measure(run, scores, run.path(out), layers)
        minutes = S.minutes_at(saved[base], step)
        saved[name] = S.derived_record(derived, base, step, selection.start, tuned, out, scores, minutes)
        saved[name] |= {"layers": list(layers)}
        run.save()


def compare(run: Run) -> None:
    """The chosen candidate against the start on every gold set under the protocol: the AER difference with its 95%
    paired bootstrap interval over sentences (how much of a difference the set's size can tell)."""
    from polyalign.align.aer import aer_difference_interval, read_gold
    from polyalign.align.aligner import Aligner
    from polyalign.checkpoint import load_model

    selection, p = run.selection, run.selection.protocol
    pick = S.offered(selection, run.results) if run.print_only else run.offered()
    if pick is None:  # a dry run before any candidate is measured
        return
    arm, step, layer, method = pick["arm"], pick["step"], pick["layer"], pick["method"]
    if S.compared(selection, run.results.get("compare")) == (arm, step, layer, method):
        print(f"compare: {arm} at step {step}, layer {layer}, {method} is compared already", flush=True)
        return
    if run.print_only:
        return
    aligner_method, threshold = S.extraction(method)
    options = {"softmax_threshold": threshold} if threshold is not None else {}
    models = (run.path(selection.start), run.folder(arm, step))
    aligners = [Aligner(load_model(m, device=run.device), encoding=p.encoding, **options) for m in models]
    out = {}
    for name in selection.gold_sets:
        gold = read_gold(run.path(selection.gold) / name)
        pairs = list(zip(gold.source, gold.target, strict=True))
        before, after = (a.align(pairs, aligner_method, int(layer), gold.languages) for a in aligners)
        difference, low, high = aer_difference_interval(before, after, gold.sure, gold.possible)
        out[name] = {"difference": round(difference, 2), "low": round(low, 2), "high": round(high, 2)}
    run.results["compare"] = {"arm": arm, "step": int(step), "layer": int(layer), "method": method, "sets": out}
    run.save()


HARNESS = {"start": start, "arms": arms, "derive": derive, "compare": compare}
assert tuple(HARNESS) == S.HARNESS_STEPS


def steps(study: Study, only=None, print_only=False, python=sys.executable, root: Path = ROOT) -> list[Step]:
    """Every step of a selection study on the one step interface, in the order a run without one named takes them
    (bench/selection.py `step_names`): each binds a `Run` to the study's results; `only`: the arms `arms` trains. A
    dry run (`print_only`) prints the harness's commands and skips the study's own steps."""
    selection = study.selection
    own = {s.name: s.run for s in (*selection.before, *selection.after)}
    file = root / "bench" / "results" / f"{study.name}.json"

    def bound(name: str) -> Callable[[Context], None]:
        def go(ctx: Context) -> None:
            if print_only and name not in HARNESS:
                print(f"step {name}: the study's own, not run in a dry run", flush=True)
                return
            print(f"step {name}", flush=True)
            (HARNESS.get(name) or own[name])(Run(selection, file, ctx, study.name, root, python, print_only, only))

        return go

    return [Step(name, f"{study.name}: {name}", bound(name), kind="study", device=selection.device)
            for name in S.step_names(selection)]  # fmt: skip


def selection_steps(study: Study, only=None, dry_run=False, python=sys.executable, root: Path = ROOT) -> dict:
    """The runner's hook (bench/run.py `steps_of`): each step of `steps` as a call without arguments, run in this
    process on a context of its own under bench/work/STUDY (its parts and the logs of its commands)."""
    work = root / "bench" / "work" / study.name

    def call(step: Step) -> Callable[[], None]:
        return lambda: step.run(Context(step.name, work, work / "logs", time.time() + 1e9, False))

    return {s.name: call(s) for s in steps(study, only, dry_run, python, root)}
