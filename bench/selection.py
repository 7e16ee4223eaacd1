"""The selection's rules and reading, as pure functions of its saved results (bench/study.py `Selection`), run by the
GPU aligner (bench/perf/gpu/aligner.py) through the selection's steps (bench/selection_steps.py).

Every candidate (a checkpoint of an arm, or an interpolation of one) is measured under one protocol on every gold set
and on each of its halves (`halves`): `dev` decides, `test` is reported untouched by the choice. The saved results are
one JSON, written by the steps:

    arms.NAME   {note, sets, minutes, model, checkpoints: {step: {"separate/argmax": {"8": {gold set: AER}},
                 "separate/argmax/dev": ..., "separate/argmax/test": ..., other methods and layers}}}
                 an interpolation also has `interpolated` (what it was made from) and `base`
    start       {scores: the same as a checkpoint's, for the start model}
    start_layers_dev  the start's AER on the dev halves at the layer rule's layers (`Selection.rule_layers`)

plus what the step that runs them saves. Missing parts are read as not run. The e5 study, which chose the aligner
fit-aligner ships by these rules, is retired: its page and JSON are bench/results/e5.md and e5.json.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench.study import Derived, Protocol, Selection

DEV, TEST = "dev", "test"
INTERPOLATED = "interpolated"


def halves(count: int) -> dict[str, list[int]]:
    """A gold set's sentences split in two for choosing among candidates: `dev` (even sentences) decides, `test`
    (odd sentences) is reported untouched by the choice; `all` is the whole set, as papers report."""
    return {"all": list(range(count)), DEV: list(range(0, count, 2)), TEST: list(range(1, count, 2))}


def half_aers(gold, links: list) -> dict[str, float]:
    """AER (%) of one gold set's links on the whole set and on each of its halves."""
    from polyalign.evaluate.alignment import score_gold

    def on(rows: list[int]) -> float:
        pick = lambda items: [items[i] for i in rows]  # noqa: E731
        part = replace(gold, source=pick(gold.source), target=pick(gold.target), sure=pick(gold.sure),
                       possible=pick(gold.possible))  # fmt: skip
        return round(score_gold(part, pick(links)).aer, 2)

    return {half: on(rows) for half, rows in halves(len(links)).items()}


def gold_scores(loaded, gold_root: Path, gold_sets, methods, layers, encoding: str = "separate") -> dict:
    """A loaded model's AER (%) per method[/half]/layer/gold set: {"separate/argmax": {"8": {"de-en": ...}}}, and the
    same under "separate/argmax/dev" and "/test" for the halves; a method with a threshold (`softmax-0.1`) is scored
    at it on the same encoded sentences (`extraction`)."""
    from polyalign.align.aer import read_gold
    from polyalign.align.aligner import Aligner
    from polyalign.align.extract import SOFTMAX_THRESHOLD

    by_threshold: dict = {}
    for method in methods:
        name, threshold = extraction(method)
        by_threshold.setdefault(threshold, {})[name] = method
    out: dict = {}
    aligner = Aligner(loaded, encoding=encoding, softmax_threshold=SOFTMAX_THRESHOLD)  # `softmax`: at 1e-3
    for gold_set in gold_sets:
        gold = read_gold(Path(gold_root) / gold_set)
        encoded = aligner.encode_words(list(zip(gold.source, gold.target, strict=True)))
        for threshold, named in by_threshold.items():
            at_threshold = aligner if threshold is None else aligner.reading_as(softmax_threshold=threshold)
            found = at_threshold.align_encoded(encoded, list(named), list(layers), gold.languages)
            for (method, layer), links in found.items():
                for half, aer in half_aers(gold, links).items():
                    key = f"{encoding}/{named[method]}" + ("" if half == "all" else f"/{half}")
                    out.setdefault(key, {}).setdefault(str(layer), {})[gold_set] = aer
    return out


def at(protocol: Protocol, scores: dict, half: str = "", layer: int | None = None) -> dict[str, float] | None:
    """The protocol's AER per gold set in a checkpoint's scores (None where it was not measured)."""
    return scores.get(protocol.key(half), {}).get(str(protocol.layer if layer is None else layer))


def last_step(record: dict) -> str | None:
    return max(record.get("checkpoints", {}), key=int, default=None)


def is_derived(record: dict) -> bool:
    return INTERPOLATED in record


def minutes_at(record: dict, step: str) -> float | None:
    """Training minutes up to `step`: a derived arm's are its base's; a trained arm's as its run logged them."""
    if is_derived(record) or step == last_step(record):
        return record.get("minutes")
    return record.get("minutes_at", {}).get(step)


# ---------------------------------------------------------------------------------------------------------
# The rule


def family(saved: dict, arm: str) -> set[str]:
    """An arm and the arms derived from it (`Selection.each_arm`: the candidates its rule chooses among)."""
    return {arm} | {name for name, record in saved.get("arms", {}).items() if record.get("base") == arm}


def candidates(selection: Selection, saved: dict, half: str, trained_only=False, layer=None, arm: str = "") -> dict:
    """(arm, step) -> the protocol's AER on `half` of every gold set (at `layer`, the protocol's by default), for every
    candidate measured on all of them; `trained_only` leaves the derived arms out; `arm`: its family only."""
    out, among = {}, family(saved, arm) if arm else None
    for name, record in saved.get("arms", {}).items():
        if (trained_only and is_derived(record)) or (among is not None and name not in among):
            continue
        for step, scores in record.get("checkpoints", {}).items():
            aer = at(selection.protocol, scores, half, layer)
            if aer and all(g in aer for g in selection.gold_sets):
                out[(name, step)] = aer
    return out


def mean(aer: dict[str, float], gold_sets) -> float:
    return sum(aer[g] for g in gold_sets) / len(gold_sets)


def choose(scored: dict[tuple, dict], start: dict, gold_sets, below_start_everywhere: bool = True):
    """The candidate the rule picks: among those below the start on every gold set, the lowest mean AER; the lowest
    mean of all when none is (or without that condition). None without candidates. `start`: the start's AER per gold
    set; or per layer ({layer: {gold set: AER}}) where a candidate is (arm, step, layer), each against its own."""
    start_of = lambda c: start[c[2]] if len(c) == 3 else start  # noqa: E731
    improving = [c for c, aer in scored.items() if all(aer[g] < start_of(c)[g] for g in gold_sets)]
    pool = (improving if below_start_everywhere else []) or list(scored)
    return min(pool, key=lambda c: mean(scored[c], gold_sets), default=None)


def rule_layer(selection: Selection, saved: dict) -> str | None:
    """The layer rule: among `selection.rule_layers`, the start's layer with the lowest mean AER under the
    protocol over the dev halves (`start_layers_dev`); None without the rule or those scores."""
    sweep = saved.get("start_layers_dev", {})
    layers = [k for k in sweep if int(k) in selection.rule_layers and all(g in sweep[k] for g in selection.gold_sets)]
    return min(layers, key=lambda k: (mean(sweep[k], selection.gold_sets), int(k)), default=None)


def candidate_layers(selection: Selection, saved: dict) -> list[str]:
    """The layers a candidate is chosen at: the protocol's, and the layer rule's where the selection has one."""
    return [str(k) for k in dict.fromkeys((selection.protocol.layer, rule_layer(selection, saved))) if k is not None]


def start_dev(selection: Selection, saved: dict) -> dict[str, dict[str, float]]:
    """The start's dev-half AER under the protocol per layer: its layer rule's sweep, and its own scores (which win
    where both have a layer)."""
    own = saved.get("start", {}).get("scores", {}).get(selection.protocol.key(DEV), {})
    return {**saved.get("start_layers_dev", {}), **own}


def chosen_at(
    selection: Selection, saved: dict, trained_only=False, below_start_everywhere: bool | None = None, arm: str = ""
) -> tuple[str, str, str] | None:
    """The (arm, step, layer) the rule picks on the dev halves (the test halves play no part): every candidate (of
    `arm`'s family where given) at each of `candidate_layers`, each against the start at its own layer;
    `below_start_everywhere` (default: the selection's) whether a candidate must be below the start on every dev half
    to be preferred."""
    start = start_dev(selection, saved)
    scored = {
        (*c, layer): aer
        for layer in candidate_layers(selection, saved)
        if all(g in start.get(layer, {}) for g in selection.gold_sets)
        for c, aer in candidates(selection, saved, DEV, trained_only, layer, arm).items()
    }
    below = selection.below_start_everywhere if below_start_everywhere is None else below_start_everywhere
    return choose(scored, start, selection.gold_sets, below)


def derivation_base(selection: Selection, saved: dict, arm: str = "") -> tuple[str, str] | None:
    """The trained checkpoint a derived arm is made from (WiSE-FT's "best trained checkpoint by mean dev-half AER";
    of `arm` where it names one): the lowest mean dev-half AER at any candidate layer, below the start everywhere or
    not, since the interpolation towards the start is what can bring it below."""
    pick = chosen_at(selection, saved, trained_only=True, below_start_everywhere=False, arm=arm)
    return pick[:2] if pick else None


def methods_at(selection: Selection, scores: dict, layer: str, half: str = DEV) -> dict[str, dict[str, float]]:
    """Extraction method -> AER per gold set on `half` at `layer`, the protocol's encoding, for every method a
    checkpoint's scores hold on all gold sets."""
    out = {}
    for key, by_layer in scores.items():
        encoding, method, *rest = key.split("/")
        aer = by_layer.get(layer, {})
        if encoding == selection.protocol.encoding and rest == ([half] if half else []):
            out |= {method: aer} if all(g in aer for g in selection.gold_sets) else {}
    return out


def chosen_method(selection: Selection, saved: dict, pick: tuple[str, str, str]) -> str:
    """The extraction rule: on the chosen model and layer, the method with the lowest mean dev-half AER among
    those measured (ties: the protocol's); the protocol's method without the rule."""
    p = selection.protocol
    if not selection.rule_layers:
        return p.method
    dev = methods_at(selection, saved["arms"][pick[0]]["checkpoints"][pick[1]], pick[2])
    return min(dev, key=lambda m: (mean(dev[m], selection.gold_sets), m != p.method), default=p.method)


def extraction(method: str) -> tuple[str, float | None]:
    """A scored method's name as the aligner's method and softmax threshold: `softmax-0.1` is softmax at 0.1; None:
    the aligner's default threshold."""
    if method.startswith("softmax-"):
        return "softmax", float(method.split("-", 1)[1])
    return method, None


# ---------------------------------------------------------------------------------------------------------
# Arms: where their models are, derived arms' records


def checkpoint_folder(selection: Selection, arm: str, step: str | int) -> str:
    return f"{selection.runs}/{arm}/checkpoints/step-{int(step):07d}"


def model_path(selection: Selection, saved: dict, arm: str, step: str) -> str:
    """A candidate's model folder (relative to the repository): a checkpoint, or the folder a derivation wrote."""
    record = saved["arms"][arm]
    return record["model"] if is_derived(record) else checkpoint_folder(selection, arm, step)


def derived_source(derived: Derived, start: str, base: str) -> dict:
    """What a derived arm is made from, as its record keeps it (a change of it makes the arm again)."""
    return {"start": start, "tuned": base, "weight": derived.weight}


def derive_command(derived: Derived, start: str, base: str, out: str) -> list[str]:
    """The `polyalign interpolate` arguments that write a derived arm's model folder."""
    return ["interpolate", "--start", start, "--tuned", base, "--weight", f"{derived.weight:g}", "--out", out]


def derived_record(derived: Derived, base_arm: str, step: str, start: str, base: str, out: str, scores: dict,
                   minutes: float | None) -> dict:  # fmt: skip
    """A derived arm as the results keep it: one checkpoint, at its base's step, and its base's training minutes."""
    w = derived.weight
    note = f"{1 - w:g} x the start + {w:g} x {base_arm} at step {step} (WiSE-FT)"
    source = {INTERPOLATED: derived_source(derived, start, base), "base": base_arm}
    return {"note": note, "sets": [], "minutes": minutes, **source, "model": out, "checkpoints": {step: scores}}
