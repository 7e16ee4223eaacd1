"""The steps of a selection study (bench/study.py `Selection`) for the one runner (bench/run.py), each resumable, all
saving to one JSON.

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
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from bench import selection as S
from bench.reporting import commit, read_json, records
from bench.study import Candidate, Study

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

    def offered(self) -> dict:
        """The offered aligner: the chosen candidate, its layer and method (bench/selection.py `offered`)."""
        self.chosen()
        return S.offered(self.selection, self.results)

    def chosen_folder(self) -> Path:
        return self.path(S.model_path(self.selection, self.results, *self.chosen()))


# ---------------------------------------------------------------------------------------------------------
# The measure at every checkpoint: AER under the protocol, on every gold set and each of its halves


def alignment_scores(run: SelectionRun, folder: Path, encodings: tuple[str, ...], layers, methods=()) -> dict:
    """AER (%) per encoding/method[/half]/layer/gold set: {"separate/argmax": {"8": {"de-en": ...}}}, and the same
    under "separate/argmax/dev" and "/test" for the halves; every method of the protocol (or `methods`)."""
    from polyalign.checkpoint import load_model

    loaded, p = load_model(folder), run.selection.protocol
    out: dict = {}
    for encoding in encodings:
        out |= gold_scores(loaded, run.path(run.selection.gold), run.selection.gold_sets,
                           methods or p.methods or (p.method,), layers, encoding)  # fmt: skip
    return out


def gold_scores(loaded, gold_root: Path, gold_sets, methods, layers, encoding: str = "separate") -> dict:
    """A loaded model's AER (%) on the gold sets in alignment_scores' layout, one encoding; a method with a
    threshold (`softmax-0.1`) is scored at it on the same encoded sentences (bench/selection.py `extraction`)."""
    from polyalign.align.aer import read_gold
    from polyalign.align.aligner import Aligner
    from polyalign.align.extract import SOFTMAX_THRESHOLD

    by_threshold: dict = {}
    for method in methods:
        name, threshold = S.extraction(method)
        by_threshold.setdefault(threshold, {})[name] = method
    out: dict = {}
    aligner = Aligner(loaded, encoding=encoding, softmax_threshold=SOFTMAX_THRESHOLD)  # `softmax`: at 1e-3
    for name in gold_sets:
        gold = read_gold(Path(gold_root) / name)
        encoded = aligner.encode_words(list(zip(gold.source, gold.target, strict=True)))
        links = {}
        for threshold, named in by_threshold.items():
            at = aligner if threshold is None else aligner.reading_as(softmax_threshold=threshold)
            found = at.align_encoded(encoded, list(named), list(layers), gold.languages)
            links |= {(named[method], layer): f for (method, layer), f in found.items()}
        score_halves(out, gold, name, encoding, links)
    return out


def score_halves(out: dict, gold, name: str, encoding: str, links: dict) -> None:
    """Each (method, layer)'s links scored on the whole gold set and on each of its halves, into `out`."""
    from polyalign.evaluate.alignment import score_gold

    for (method, layer), found in links.items():
        for half, rows in S.halves(len(found)).items():
            key = f"{encoding}/{method}" + ("" if half == "all" else f"/{half}")
            cell = out.setdefault(key, {}).setdefault(str(layer), {})
            cell[name] = round(score_gold(subset(gold, rows), [found[i] for i in rows]).aer, 2)


def subset(gold, rows: list[int]):
    pick = lambda items: [items[i] for i in rows]  # noqa: E731
    return replace(gold, source=pick(gold.source), target=pick(gold.target), sure=pick(gold.sure),
                   possible=pick(gold.possible))  # fmt: skip


def every_encoding(p) -> tuple[str, ...]:
    return p.encodings or (p.encoding,)


def protocol_layers(run: SelectionRun, rule_layer: bool = True) -> tuple[int, ...]:
    """The layers a candidate is measured at: the protocol's, and the layer rule's (the offered model is
    chosen among every checkpoint and interpolation at either layer); `rule_layer=False`: the protocol's only."""
    p, rule = run.selection.protocol, S.rule_layer(run.selection, run.results)
    return tuple(dict.fromkeys((p.layer, *p.layers, *([int(rule)] if rule_layer and rule else []))))


def missing_layers(scores: dict, key: str, layers) -> list[int]:
    """The layers of `layers` a candidate's scores lack under `key` (e.g. a candidate measured before the layer rule
    existed)."""
    return [layer for layer in layers if str(layer) not in scores.get(key, {})]


def merge_scores(into: dict, scores: dict) -> None:
    """Add `alignment_scores` cells to a record without dropping the ones it has."""
    for key, by_layer in scores.items():
        for layer, cell in by_layer.items():
            into.setdefault(key, {}).setdefault(layer, cell)


# ---------------------------------------------------------------------------------------------------------
# The harness's steps


def start(run: SelectionRun, only=None) -> None:
    """The start model under the protocol (every encoding), and the protocol's AER at each of its layers."""
    p, folder = run.selection.protocol, run.path(run.selection.start)
    if run.dry_run:
        return
    if "start" not in run.results:
        layers = protocol_layers(run, rule_layer=False)
        run.results["start"] = {"scores": alignment_scores(run, folder, every_encoding(p), layers)}
        run.save()
    if "start_layers" not in run.results:  # the best layer, chosen on the gold sets: shown, never used
        from polyalign.checkpoint import load_model

        every = range(load_model(folder).model.config.num_layers + 1)
        run.results["start_layers"] = alignment_scores(run, folder, (p.encoding,), every)[p.key()]
        run.save()
    rule_layers = run.selection.rule_layers
    if rule_layers and "start_layers_dev" not in run.results:  # the layer rule, on the dev halves
        scores = alignment_scores(run, folder, (p.encoding,), rule_layers, (p.method,))
        run.results["start_layers_dev"] = scores[p.key(S.DEV)]
        run.save()
    layers = protocol_layers(run, rule_layer=bool(rule_layers))  # every method at every candidate layer
    scores = run.results["start"]["scores"]
    if any(str(layer) not in scores.get(f"{p.encoding}/{m}", {}) for m in p.methods for layer in layers):
        merge_scores(scores, alignment_scores(run, folder, (p.encoding,), layers))
        run.save()


def train_command(run: SelectionRun, arm: Candidate, run_dir: Path) -> list[str]:
    """`polyalign pretrain` of one arm: the selection's schedule, a checkpoint every `save_every` steps, every one
    kept, the arm's overrides, `trainer.stop_at` where it stops early; resumed when its run exists."""
    selection = run.selection
    sets = [f"trainer.max_steps={selection.steps}", f"trainer.save_every={selection.save_every}"]
    sets += ["trainer.keep_checkpoints=0", *arm.overrides]
    sets += [f"trainer.stop_at={arm.stop_at}"] if arm.stop_at else []
    sets += [f"trainer.max_minutes={arm.minutes:g}", "trainer.stop_at=0"] if arm.minutes else []
    if arm.rule_layer:  # self-trained at the layer rule's layer, which the step `start` measures
        layer = S.rule_layer(selection, run.results)
        if layer is None and not run.dry_run:
            raise SystemExit(f"{arm.name}: the layer rule's layer is not measured yet (run the step start first)")
        sets.append(f"objectives.0.config.layer={layer or 'RULE_LAYER'}")
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
        run_dir = run.path(selection.runs) / arm.name
        if not trained(arm, run_dir, selection.steps):
            run.sh(train_command(run, arm, run_dir))
        if run.dry_run:
            continue
        record = run.results.setdefault("arms", {}).setdefault(arm.name, {})
        record |= {"note": arm.note, "sets": list(arm.overrides), "recipe": arm.recipe}
        record |= {"init_from": arm.init_from} if arm.init_from not in (None, selection.start) else {}
        layers = protocol_layers(run)
        record |= {"layers": sorted(layers)}
        logged = records(run_dir / "metrics.jsonl")
        record["minutes"] = round(max((r.get("seconds", 0.0) for r in logged), default=0.0) / 60, 1)
        checkpoints = sorted((run_dir / "checkpoints").glob("step-*"))
        last = int(checkpoints[-1].name.split("-")[1])
        for checkpoint in checkpoints:
            step = str(int(checkpoint.name.split("-")[1]))
            record.setdefault("minutes_at", {})[step] = round(minutes_logged(logged, int(step)), 1)
            if step not in record.setdefault("checkpoints", {}):  # a rule-layer arm: its encoding only
                every = int(step) == last and not arm.rule_layer
                encodings = every_encoding(selection.protocol) if every else (selection.protocol.encoding,)
                record["checkpoints"][step] = alignment_scores(run, checkpoint, encodings, layers)
                run.save()
            elif missing := missing_layers(record["checkpoints"][step], selection.protocol.key(), layers):
                encoding = (selection.protocol.encoding,)
                merge_scores(record["checkpoints"][step], alignment_scores(run, checkpoint, encoding, missing))
                run.save()
        record["model"] = S.checkpoint_folder(selection, arm.name, last)
        run.save()


def trained(arm: Candidate, run_dir: Path, steps: int) -> bool:
    """An arm's run is done: its last checkpoint is saved, or (a minutes arm) its training minutes are spent."""
    if arm.minutes:
        logged = records(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").is_file() else []
        seconds = max((r.get("seconds", 0.0) for r in logged), default=0.0)
        return (run_dir / "checkpoints").is_dir() and seconds >= 0.99 * arm.minutes * 60
    return (run_dir / "checkpoints" / f"step-{arm.stop_at or steps:07d}").is_dir()


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
        elif pick := S.derivation_base(selection, run.results):
            base, step = pick
        else:
            raise SystemExit(f"{run.study.name}: no trained checkpoint is measured yet (run the step arms first)")
        tuned, key = S.model_path(selection, run.results, base, step), S.DERIVED_KEYS[derived.kind]
        layers, encoding = protocol_layers(run), (selection.protocol.encoding,)
        made = [r for r in saved.values() if r.get(key) == S.derived_source(derived, selection.start, tuned)]
        for record in made:  # made before: measured at a layer it lacks where its folder is still here
            scores, folder = record["checkpoints"][step], run.path(record["model"])
            if (missing := missing_layers(scores, selection.protocol.key(), layers)) and folder.is_dir():
                merge_scores(scores, alignment_scores(run, folder, encoding, missing))
                record["layers"] = sorted({*record.get("layers", ()), *layers})
                run.save()
        if made:
            continue
        name = derived.name_for(base)
        out = f"{selection.runs}/{name}"
        run.sh(run.polyalign(*S.derive_command(derived, selection.start, tuned, out), "--overwrite"))
        if run.dry_run:
            continue
        scores = alignment_scores(run, run.path(out), encoding, layers)
        minutes = S.minutes_at(saved[base], step)
        saved[name] = S.derived_record(derived, base, step, selection.start, tuned, out, scores, minutes)
        saved[name] |= {"layers": list(layers)}
        run.save()


def compare(run: SelectionRun, only=None) -> None:
    """The chosen candidate against the start on every gold set under the protocol: the AER difference with its 95%
    paired bootstrap interval over sentences (how much of a difference the set's size can tell)."""
    from polyalign.align.aer import aer_difference_interval, read_gold
    from polyalign.align.aligner import Aligner
    from polyalign.checkpoint import load_model

    selection, p = run.selection, run.selection.protocol
    pick = S.offered(selection, run.results) if run.dry_run else run.offered()
    if pick is None:  # a dry run before any candidate is measured
        return
    arm, step, layer, method = pick["arm"], pick["step"], pick["layer"], pick["method"]
    if S.compared(selection, run.results.get("compare")) == (arm, step, layer, method):
        print(f"compare: {arm} at step {step}, layer {layer}, {method} is compared already", flush=True)
        return
    if run.dry_run:
        return
    models = (run.path(selection.start), run.chosen_folder())
    aligner_method, threshold = S.extraction(method)
    options = {"softmax_threshold": threshold} if threshold is not None else {}
    aligners = [Aligner(load_model(m), encoding=p.encoding, **options) for m in models]
    out = {}
    for name in selection.gold_sets:
        gold = read_gold(run.path(selection.gold) / name)
        pairs = list(zip(gold.source, gold.target, strict=True))
        before, after = (a.align(pairs, aligner_method, int(layer), gold.languages) for a in aligners)
        difference, low, high = aer_difference_interval(before, after, gold.sure, gold.possible)
        out[name] = {"difference": round(difference, 2), "low": round(low, 2), "high": round(high, 2)}
    run.results["compare"] = {"arm": arm, "step": int(step), "layer": int(layer), "method": method, "sets": out}
    run.save()


HARNESS_STEPS = dict(zip(S.HARNESS_STEPS, (start, arms, derive, compare), strict=True))


def selection_steps(study: Study, only: list[str] | None = None, dry_run: bool = False, python: str = sys.executable,
                    root: Path = ROOT) -> dict[str, Callable[[], None]]:  # fmt: skip
    """Every step of a selection study bound to its saved results, in the order a run without one named takes them
    (bench/selection.py); `only`: the arms the step `arms` trains. A dry run skips the study's own steps."""
    results = root / "bench" / "results" / f"{study.name}.json"
    run = SelectionRun(study, read_json(results) if results.is_file() else {}, root, python, dry_run)
    own = {s.name: s.run for s in (*study.selection.before, *study.selection.after)}

    def step(name: str) -> Callable[[], None]:
        def go() -> None:
            if dry_run and name not in HARNESS_STEPS:
                print(f"step {name}: the study's own, not run in a dry run", flush=True)
                return
            print(f"step {name}", flush=True)
            HARNESS_STEPS[name](run, only) if name in HARNESS_STEPS else own[name](run)

        return go

    return {name: step(name) for name in S.step_names(study.selection)}
