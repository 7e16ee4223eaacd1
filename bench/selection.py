"""A selection study's rules and reading, as pure functions of its saved results (bench/study.py `Selection`).

Every candidate (a checkpoint of an arm, or a derived arm) is measured under one protocol on every gold set and on
each of its halves (`halves`): `dev` decides, `test` is reported untouched by the choice. The saved results are one
JSON, bench/results/STUDY.json, written by bench/selection_run.py:

    arms.NAME   {note, sets, minutes, model, checkpoints: {step: {"separate/argmax": {"8": {gold set: AER}},
                 "separate/argmax/dev": ..., "separate/argmax/test": ..., other encodings, methods and layers}}}
                 a derived arm also has `interpolated` or `plugged_out` (what it was made from)
    start       {scores: the same as a checkpoint's, for the start model}
    start_layers  the protocol's AER of the start at every layer (chosen on the gold sets: shown, never used)
    compare     the chosen candidate against the start: the AER difference and its paired bootstrap interval

plus what the study's own steps save. Missing parts are read as not run.
"""

from __future__ import annotations

from pathlib import Path

from bench.reporting import Block, read_json
from bench.study import Derived, Protocol, Reference, Selection

DEV, TEST = "dev", "test"
HARNESS_STEPS = ("start", "arms", "derive", "compare")
"""The harness's steps of every selection study (bench/selection_run.py), between the study's own."""
DERIVED_KEYS = {"interpolate": "interpolated", "plug-out": "plugged_out"}
MISSING = "–"


def step_names(selection: Selection) -> list[str]:
    """Every step in the order a run without a step named takes them."""
    return [*(s.name for s in selection.before), *HARNESS_STEPS, *(s.name for s in selection.after)]


def halves(count: int) -> dict[str, list[int]]:
    """A gold set's sentences split in two for choosing among candidates: `dev` (even sentences) decides, `test`
    (odd sentences) is reported untouched by the choice; `all` is the whole set, as papers report."""
    return {"all": list(range(count)), DEV: list(range(0, count, 2)), TEST: list(range(1, count, 2))}


def at(protocol: Protocol, scores: dict, half: str = "", layer: int | None = None) -> dict[str, float] | None:
    """The protocol's AER per gold set in a checkpoint's scores (None where it was not measured)."""
    return scores.get(protocol.key(half), {}).get(str(protocol.layer if layer is None else layer))


def last_step(record: dict) -> str | None:
    return max(record.get("checkpoints", {}), key=int, default=None)


def is_derived(record: dict) -> bool:
    return any(key in record for key in DERIVED_KEYS.values())


def minutes_at(record: dict, step: str) -> float | None:
    """Training minutes up to `step`: a derived arm's are its base's; a trained arm's as its run logged them."""
    if is_derived(record) or step == last_step(record):
        return record.get("minutes")
    return record.get("minutes_at", {}).get(step)


# ---------------------------------------------------------------------------------------------------------
# The rule


def candidates(selection: Selection, saved: dict, half: str, trained_only: bool = False) -> dict[tuple, dict]:
    """(arm, step) -> the protocol's AER on `half` of every gold set, for every candidate measured on all of them;
    `trained_only` leaves the derived arms out."""
    out = {}
    for name, record in saved.get("arms", {}).items():
        if trained_only and is_derived(record):
            continue
        for step, scores in record.get("checkpoints", {}).items():
            aer = at(selection.protocol, scores, half)
            if aer and all(g in aer for g in selection.gold_sets):
                out[(name, step)] = aer
    return out


def choose(scored: dict[tuple, dict], start: dict[str, float], gold_sets, below_start_everywhere: bool = True):
    """The candidate the rule picks: among those below the start on every gold set, the lowest mean AER; the lowest
    mean of all when none is (or without that condition). None without candidates."""
    improving = [c for c, aer in scored.items() if all(aer[g] < start[g] for g in gold_sets)]
    pool = (improving if below_start_everywhere else []) or list(scored)
    return min(pool, key=lambda c: sum(scored[c][g] for g in gold_sets) / len(gold_sets), default=None)


def chosen(selection: Selection, saved: dict, trained_only: bool = False) -> tuple[str, str] | None:
    """The (arm, step) the rule picks on the dev halves (the test halves play no part)."""
    start = at(selection.protocol, saved.get("start", {}).get("scores", {}), DEV)
    if start is None:
        return None
    scored = candidates(selection, saved, DEV, trained_only)
    return choose(scored, start, selection.gold_sets, selection.below_start_everywhere)


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
    if derived.kind == "interpolate":
        return {"start": start, "tuned": base, "weight": derived.weight}
    return {"model": base}


def derive_command(derived: Derived, start: str, base: str, out: str) -> list[str]:
    """The `polyalign` arguments that write a derived arm's model folder."""
    if derived.kind == "interpolate":
        return ["interpolate", "--start", start, "--tuned", base, "--weight", f"{derived.weight:g}", "--out", out]
    return ["plug-out", "--model", base, "--out", out]


def derived_record(derived: Derived, base_arm: str, step: str, start: str, base: str, out: str, scores: dict,
                   minutes: float | None) -> dict:  # fmt: skip
    """A derived arm as the results keep it: one checkpoint, at its base's step, and its base's training minutes."""
    if derived.kind == "interpolate":
        w = derived.weight
        note = f"{1 - w:g} x the start + {w:g} x {base_arm} at step {step} (WiSE-FT)"
    else:
        note = f"{base_arm} at step {step} with its cross-attention plugged out (VECO §3.1)"
    source = {DERIVED_KEYS[derived.kind]: derived_source(derived, start, base)}
    return {"note": note, "sets": [], "minutes": minutes, **source, "model": out, "checkpoints": {step: scores}}


# ---------------------------------------------------------------------------------------------------------
# References and the summary


def reference_values(reference: Reference, gold_sets, root: Path) -> dict[str, float]:
    """A reference row: its published values, or the gold sets' AER from another bench's saved result."""
    if not reference.path:
        return dict(reference.values)
    data = read_json(root / reference.path)[reference.key]
    return {g: round(data[g]["aer"], 2) for g in gold_sets if g in data}


def baseline_of(selection: Selection) -> Reference | None:
    """The reference the chosen candidate is counted against beside the start."""
    return next((r for r in selection.references if r.name == selection.baseline), None)


def short_name(reference: Reference) -> str:
    return reference.summary or reference.name


def summary(selection: Selection, saved: dict, root: Path) -> dict:
    """The fields a script reads: the chosen candidate's AER under the protocol (all of each gold set, and the test
    halves apart), the start's, every reference row that names a field, and the study's own steps' fields."""
    p, start = selection.protocol, saved.get("start", {}).get("scores", {})
    out: dict = {}
    if pick := chosen(selection, saved):
        arm, step = pick
        record = saved["arms"][arm]
        scores = record["checkpoints"][step]
        out |= {"model": model_path(selection, saved, arm, step), "arm": arm, "step": int(step)}
        out |= {"training_minutes": minutes_at(record, step)}
    out |= {"layer": p.layer, "protocol": f"{p.encoding} encoding, {p.method}, layer {p.layer}"}
    if pick:
        out |= {"aer": at(p, scores), "aer_test_halves": at(p, scores, TEST)}
    out |= {"start_test_halves": at(p, start, TEST), "start": {"aer": at(p, start)}}
    for ref in (r for r in selection.references if r.summary):  # a published row names where it is printed
        out[ref.summary] = {"aer": reference_values(ref, selection.gold_sets, root)}
        out[ref.summary] |= {} if ref.path else {"source": ref.source}
    for step in (*selection.before, *selection.after):
        out |= step.summary(saved)
    return out


# ---------------------------------------------------------------------------------------------------------
# What the page shows (bench/page.py draws the blocks)


def arm_names(selection: Selection, saved: dict) -> list[str]:
    """Every arm: the declared ones, then every other the results hold (the derived ones among them)."""
    declared = [a.name for a in selection.arms]
    return declared + [name for name in saved.get("arms", {}) if name not in declared]


def arm_line(selection: Selection, name: str, record: dict) -> str:
    arm = next((a for a in selection.arms if a.name == name), None)
    note = record.get("note") or (arm.note if arm else "")
    sets = record.get("sets", list(arm.overrides) if arm else [])
    recipe = record.get("recipe") or (arm.recipe if arm else None)
    line = f"- `{name}`" + (f" (recipe `{recipe}`)" if recipe and not is_derived(record) else "") + f": {note}"
    line += f" (`{' '.join(sets)}`)" if sets else ""
    return line + ("" if record.get("checkpoints") else " (not run)")


def aer_row(label: str, aer: dict | None, gold_sets) -> tuple:
    return (label, *((aer or {}).get(g, MISSING) for g in gold_sets))


def selection_blocks(selection: Selection, saved: dict, s: dict, root: Path, figure: str) -> list[Block]:
    """The selection's part of the page: every arm's last checkpoint, the chosen candidate and the references; the
    arms' notes; the chosen one's counts, curve, bootstrap, test halves; the arms at one step; the gains against a
    published pair; every extraction method; the start's best layers."""
    p, gold, arms = selection.protocol, selection.gold_sets, saved.get("arms", {})
    start = saved.get("start", {}).get("scores", {})
    refs = {r.name: reference_values(r, gold, root) for r in selection.references}
    header = ("model", *gold)
    rows = [aer_row(f"start: {Path(selection.start).name}", at(p, start), gold)]
    for name in arm_names(selection, saved):
        record, step = arms.get(name, {}), last_step(arms.get(name, {}))
        label = f"{name} ({step} steps, {record.get('minutes')} min)" if step else f"{name}: not run"
        rows.append(aer_row(label, step and at(p, record["checkpoints"][step]), gold))
    pick = chosen(selection, saved)
    label = f"chosen: {s['arm']} at step {s['step']} ({s['training_minutes']} min)" if pick else "chosen: none yet"
    rows += [aer_row(label, s.get("aer"), gold)]
    for ref in selection.references:  # published numbers as printed, measured ones as ours
        values = refs[ref.name] if ref.path else {g: f"{v:.{ref.digits}f}" for g, v in refs[ref.name].items()}
        rows.append(aer_row(ref.name, values, gold))
    notes = [arm_line(selection, name, arms.get(name, {})) for name in arm_names(selection, saved)]
    blocks = [
        Block(selection.heading, (selection.about,), header, tuple(rows)),
        Block(text=("\n".join(notes), *chosen_lines(selection, s, refs))),
    ]
    if not pick:
        return blocks
    blocks.append(Block(text=(f"![AER by step]({figure})",)))
    chosen_scores = arms[s["arm"]]["checkpoints"][str(s["step"])]
    blocks += [
        *compare_blocks(saved.get("compare"), s),
        Block(text=("Test halves only (odd sentences; untouched by the choice):",), header=header,
              rows=(aer_row("start", s["start_test_halves"], gold), aer_row(label, s["aer_test_halves"], gold))),
        *same_step_blocks(selection, saved),
        *gain_blocks(selection, refs, s),
        *method_blocks(start, chosen_scores, label, gold),
        *best_layer_blocks(saved.get("start_layers"), gold),
    ]  # fmt: skip
    return blocks


def chosen_lines(selection: Selection, s: dict, refs: dict) -> list[str]:
    """On how many gold sets the chosen candidate is below the start and below the baseline reference."""
    if "aer" not in s:
        return ["No candidate is measured yet."]
    against = [("the start", s["start"]["aer"])]
    against += [(short_name(b), refs[b.name]) for b in [baseline_of(selection)] if b]
    counts = []
    for what, aer in against:
        below = [g for g in selection.gold_sets if g in aer and s["aer"][g] < aer[g]]
        counts.append(f"below {what} on {len(below)} of {len(selection.gold_sets)} ({', '.join(below) or 'none'})")
    return [f"The chosen candidate ({s['model']}): {', '.join(counts)}."]


def compare_blocks(compare: dict | None, s: dict) -> list[Block]:
    if not compare:
        return []
    cells = [f"{v['difference']:+.1f} [{v['low']:+.1f}, {v['high']:+.1f}]" for v in compare["sets"].values()]
    stale = (compare["arm"], compare["step"]) != (s["arm"], s["step"])
    which = f"{compare['arm']} at step {compare['step']}" + (" (no longer the chosen one: run `compare`)" * stale)
    text = (
        f"{which} minus the start, AER points, with the 95% paired bootstrap interval over each set's sentences "
        "(an interval that straddles 0 is a difference the set cannot tell from sampling):"
    )
    return [Block(text=(text,), header=("", *compare["sets"]), rows=(("difference [95%]", *cells),))]


def same_step_blocks(selection: Selection, saved: dict) -> list[Block]:
    step = str(selection.same_step)
    rows = tuple(
        aer_row(f"{name} at step {step}", at(selection.protocol, record["checkpoints"][step]), selection.gold_sets)
        for name, record in saved.get("arms", {}).items()
        if step in record.get("checkpoints", {})
    )
    text = f"The arms at the same step of the same schedule (step {step}):"
    return [Block(text=(text,), header=("model", *selection.gold_sets), rows=rows)] if selection.same_step else []


def gain_blocks(selection: Selection, refs: dict, s: dict) -> list[Block]:
    """The start's gap to a published start, and the training gains, ours and theirs, on the sets both report."""
    if not selection.gains:
        return []
    (theirs, tuned), start, aer = selection.gains, s["start"]["aer"], s["aer"]
    before, after = refs[theirs], refs[tuned]
    rows = tuple(
        (g, start[g] - before[g], aer[g] - start[g], after[g] - before[g], aer[g] - after[g])
        for g in before
        if g in after and g in aer
    )
    text = (
        f"What stands between the chosen candidate and `{tuned}` (AER points, on the gold sets both report): the "
        f"start's gap to `{theirs}`, plus the difference of the two trainings' gains, is the remaining gap:"
    )
    header = ("gold set", "our start - theirs", "our training", "their training", "remaining gap")
    return [Block(text=(text,), header=header, rows=rows)]


def method_blocks(start: dict, chosen_scores: dict, label: str, gold_sets) -> list[Block]:
    """Every encoding/method measured on both, start -> chosen, one table per layer both have."""
    keys = [k for k in sorted(start) if k in chosen_scores and k.count("/") == 1]
    layers = sorted({int(layer) for k in keys for layer in start[k] if layer in chosen_scores[k]})
    blocks = []
    for layer in map(str, layers):
        rows = tuple(
            (k, *(cell(start[k][layer], chosen_scores[k][layer], g) for g in gold_sets))
            for k in keys
            if layer in start[k] and layer in chosen_scores[k]
        )
        heading = f"Every extraction method at layer {layer} (start → {label})"
        blocks.append(Block(heading, header=("encoding / method", *gold_sets), rows=rows, level=3))
    return blocks


def cell(before: dict, after: dict, gold: str) -> str:
    return f"{before[gold]:.1f} → {after[gold]:.1f}" if gold in before and gold in after else MISSING


def best_layer_blocks(layers: dict | None, gold_sets) -> list[Block]:
    """The start's best layer per gold set: chosen on the gold sets, so shown for scale and never used."""
    if not layers:
        return []
    best = {g: min(layers, key=lambda k: (layers[k][g], int(k))) for g in gold_sets}
    parts = ", ".join(f"{g} {layers[best[g]][g]:.1f} (layer {best[g]})" for g in gold_sets)
    return [
        Block(text=(f"Best layer of the start, **chosen on the gold sets** (shown for scale, not used): {parts}.",))
    ]
