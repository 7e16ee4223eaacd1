"""A selection study's page body for the one page writer (bench/page.py), from its saved results and the rules of
bench/selection.py: every arm's last checkpoint, the chosen candidate and the references; the offered aligner; the
comparison with the start; the ablation of every arm, extraction method and layer measured."""

from __future__ import annotations

from pathlib import Path

from bench import selection as S
from bench.figures import checkpoint_curves
from bench.reporting import Block, note, read_json, write_json
from bench.study import Selection, Study


def arm_names(selection: Selection, saved: dict) -> list[str]:
    """Every arm: the declared ones, then every other the results hold (the derived ones among them)."""
    declared = [a.name for a in selection.arms]
    return declared + [name for name in saved.get("arms", {}) if name not in declared]


def arm_line(selection: Selection, name: str, record: dict) -> str:
    arm = next((a for a in selection.arms if a.name == name), None)
    note = record.get("note") or (arm.note if arm else "")
    sets = record.get("sets", list(arm.overrides) if arm else [])
    recipe = record.get("recipe") or (arm.recipe if arm else None)
    line = f"- `{name}`" + (f" (recipe `{recipe}`)" if recipe and not S.is_derived(record) else "") + f": {note}"
    line += f" (`{' '.join(sets)}`)" if sets else ""
    return line + ("" if record.get("checkpoints") else " (not run)")


def aer_row(label: str, aer: dict | None, gold_sets) -> tuple:
    return (label, *((aer or {}).get(g, S.MISSING) for g in gold_sets))


def selection_blocks(selection: Selection, saved: dict, s: dict, root: Path, figure: str) -> list[Block]:
    """The selection's part of the page: every arm's last checkpoint, the chosen candidate and the references; the
    arms' notes; the chosen one's counts, curve, bootstrap, test halves; the arms at one step; the gains against a
    published pair; every extraction method; the start's best layers."""
    p, gold, arms = selection.protocol, selection.gold_sets, saved.get("arms", {})
    start = saved.get("start", {}).get("scores", {})
    refs = {r.name: S.reference_values(r, gold, root) for r in selection.references}
    header = ("model", *gold)
    rows = [aer_row(f"start: {Path(selection.start).name}", S.at(p, start), gold)]
    for name in arm_names(selection, saved):
        record, step = arms.get(name, {}), S.last_step(arms.get(name, {}))
        label = f"{name} ({step} steps, {record.get('minutes')} min)" if step else f"{name}: not run"
        rows.append(aer_row(label, step and S.at(p, record["checkpoints"][step]), gold))
    pick = S.chosen(selection, saved)
    label = f"chosen: {s['arm']} at step {s['step']} ({s['training_minutes']} min)" if pick else "chosen: none yet"
    label += f", layer {s['layer']}, {s['method']}" if pick and (s["layer"], s["method"]) != (p.layer, p.method) else ""
    rows += [aer_row(label, s.get("aer"), gold)]
    for ref in selection.references:  # published numbers as printed, measured ones as ours
        values = refs[ref.name] if ref.path else {g: f"{v:.{ref.digits}f}" for g, v in refs[ref.name].items()}
        rows.append(aer_row(ref.name, values, gold))
    notes = [arm_line(selection, name, arms.get(name, {})) for name in arm_names(selection, saved)]
    blocks = [
        Block(selection.heading, (selection.about,), header, tuple(rows)),
        Block(text=("\n".join(notes), *chosen_lines(selection, s, refs), *offered_lines(selection, saved))),
    ]
    if not pick:
        return blocks
    blocks.append(Block(text=(f"![AER by step]({figure})",)))
    chosen_scores = arms[s["arm"]]["checkpoints"][str(s["step"])]
    blocks += [
        *compare_blocks(selection, saved.get("compare"), s),
        Block(text=("Test halves only (odd sentences; untouched by the choice):",), header=header,
              rows=(aer_row("start", s["start_test_halves"], gold), aer_row(label, s["aer_test_halves"], gold))),
        *same_step_blocks(selection, saved),
        *gain_blocks(selection, refs, s),
        *method_blocks(start, chosen_scores, label, gold),
        *best_layer_blocks(saved.get("start_layers"), gold),
        *ablation_blocks(selection, saved),
    ]  # fmt: skip
    return blocks


def chosen_lines(selection: Selection, s: dict, refs: dict) -> list[str]:
    """On how many gold sets the chosen candidate is below the start and below the baseline reference."""
    if "aer" not in s:
        return ["No candidate is measured yet."]
    against = [("the start", s["start"]["aer"])]
    against += [(S.short_name(b), refs[b.name]) for b in [S.baseline_of(selection)] if b]
    counts = []
    for what, aer in against:
        below = [g for g in selection.gold_sets if g in aer and s["aer"][g] < aer[g]]
        counts.append(f"below {what} on {len(below)} of {len(selection.gold_sets)} ({', '.join(below) or 'none'})")
    return [f"The chosen candidate ({s['model']}): {', '.join(counts)}."]


def offered_lines(selection: Selection, saved: dict) -> list[str]:
    """The selection rule in numbers: the layer rule's layer (the start's mean dev-half AER at each), and the offered
    aligner with its mean dev-half AER."""
    if not selection.rule_layers or not (pick := S.offered(selection, saved)):
        return []
    gold, sweep, mean = selection.gold_sets, saved.get("start_layers_dev", {}), S.mean
    means = ", ".join(
        f"{k} {mean(v, gold):.2f}" for k, v in sweep.items() if int(k) in selection.rule_layers and set(gold) <= set(v)
    )
    scores = saved["arms"][pick["arm"]]["checkpoints"][pick["step"]]
    dev = S.methods_at(selection, scores, pick["layer"])[pick["method"]]
    layers, layer = " and ".join(S.candidate_layers(selection, saved)), S.rule_layer(selection, saved)
    return [
        f"The layer rule's layer: {layer} (the start's mean dev-half AER under the protocol, by "
        f"layer, from its own sweep `start_layers_dev`: {means}); candidates at layers {layers}, each against the "
        f"start at its own layer. **The offered aligner**: {pick['arm']} at step {pick['step']}, layer "
        f"{pick['layer']}, `{pick['method']}` extraction (mean dev-half AER {mean(dev, gold):.2f}; the extraction "
        "chosen on the dev halves among those measured on that model and layer)."
    ]


def compare_blocks(selection: Selection, compare: dict | None, s: dict) -> list[Block]:
    if not compare:
        return []
    cells = [f"{v['difference']:+.1f} [{v['low']:+.1f}, {v['high']:+.1f}]" for v in compare["sets"].values()]
    stale = S.compared(selection, compare) != (s["arm"], str(s["step"]), str(s["layer"]), s["method"])
    which = f"{compare['arm']} at step {compare['step']}" + (" (no longer the chosen one: run `compare`)" * stale)
    p = selection.protocol
    if (compare.get("layer", p.layer), compare.get("method", p.method)) != (p.layer, p.method):
        which += f" (layer {compare['layer']}, {compare['method']})"
    text = (
        f"{which} minus the start, AER points, with the 95% paired bootstrap interval over each set's sentences "
        "(an interval that straddles 0 is a difference the set cannot tell from sampling):"
    )
    return [Block(text=(text,), header=("", *compare["sets"]), rows=(("difference [95%]", *cells),))]


def same_step_blocks(selection: Selection, saved: dict) -> list[Block]:
    step = str(selection.same_step)
    rows = tuple(
        aer_row(f"{name} at step {step}", S.at(selection.protocol, record["checkpoints"][step]), selection.gold_sets)
        for name, record in saved.get("arms", {}).items()
        if step in record.get("checkpoints", {})
    )
    text = f"The arms at the same step of the same schedule (step {step}):"
    return [Block(text=(text,), header=("model", *selection.gold_sets), rows=rows)] if selection.same_step else []


def gain_blocks(selection: Selection, refs: dict, s: dict) -> list[Block]:
    """For each published (start, trained) pair: the start's gap to theirs, and the training gains, ours and theirs,
    on the sets both report."""
    start, aer, blocks = s["start"]["aer"], s["aer"], []
    for theirs, tuned in selection.gains:
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
        blocks.append(Block(text=(text,), header=header, rows=rows))
    return blocks


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
    return f"{before[gold]:.1f} → {after[gold]:.1f}" if gold in before and gold in after else S.MISSING


def best_layer_blocks(layers: dict | None, gold_sets) -> list[Block]:
    """The start's best layer per gold set: chosen on the gold sets, so shown for scale and never used."""
    if not layers:
        return []
    best = {g: min(layers, key=lambda k: (layers[k][g], int(k))) for g in gold_sets}
    parts = ", ".join(f"{g} {layers[best[g]][g]:.1f} (layer {best[g]})" for g in gold_sets)
    return [
        Block(text=(f"Best layer of the start, **chosen on the gold sets** (shown for scale, not used): {parts}.",))
    ]


def ablation_blocks(selection: Selection, saved: dict) -> list[Block]:
    """Every arm (trained and derived) at its last checkpoint, and the start, under every extraction method measured
    with the protocol's encoding: the mean AER over the dev halves and over the whole sets, one table per layer."""
    gold, arms, mean, methods_at = selection.gold_sets, saved.get("arms", {}), S.mean, S.methods_at
    rows = [("start", "", "", saved.get("start", {}).get("scores", {}))]
    for name, record in arms.items():
        if step := S.last_step(record):
            rows.append((name, step, S.minutes_at(record, step), record["checkpoints"][step]))
    layers = sorted({int(k) for *_, scores in rows for by_layer in scores.values() for k in by_layer})
    blocks = []
    for layer in map(str, layers):
        found = [(row, methods_at(selection, row[3], layer), methods_at(selection, row[3], layer, "")) for row in rows]
        methods = list(dict.fromkeys(m for _, dev, _ in found for m in dev))
        if not methods:
            continue
        table = tuple(
            (name, step, minutes, *(f"{mean(dev[m], gold):.2f} / {mean(full[m], gold):.2f}" if m in dev and m in full
                                    else S.MISSING for m in methods))
            for (name, step, minutes, _), dev, full in found
            if dev
        )  # fmt: skip
        heading = f"Ablation at layer {layer}: mean AER over the {len(gold)} gold sets, dev halves / whole sets"
        text = (
            f"Every arm at its last checkpoint ({selection.protocol.encoding} encoding); the dev halves decide, the "
            "whole sets include them. Minutes: training minutes up to that checkpoint (a derived arm: its base's).",
        )
        header = ("model", "step", "training minutes", *methods)
        blocks.append(Block(heading, text, header, table, level=3))
    return blocks


def selection_body(study: Study, results: Path, notes: dict, root: Path, produced: str) -> tuple[str | None, list]:
    """A selection study's page below its provenance line (the commit of its runs, the lines), from
    bench/results/STUDY.json: its own steps' blocks before and after the selection's, each step's note after its
    blocks; writes the summary JSON and the curve of the best trained arm beside it."""
    selection, saved = study.selection, read_json(results / f"{study.name}.json")
    summary = S.summary(selection, saved, root)
    write_json(results / f"{study.name}_summary.json", summary, indent=1)
    figure = Path(study.name) / "aer_by_step.png"
    draw_selection_curve(study, saved, results / figure, root)
    lines = [
        f"The runs: `flock /tmp/polyalign-cpu.lock python -m bench.run {study.name} [STEP ...]` (steps "
        f"{', '.join(S.step_names(selection))}; each resumable), last saved {saved.get('date', '-')}. Data: "
        f"`bench/results/{study.name}.json`; the fields a script reads: `bench/results/{study.name}_summary.json`.",
        "",
        *note(notes, "_page"),
    ]

    def step_lines(step) -> list[str]:  # a step's blocks, then its note
        said = note(notes, step.name)
        return [*step.blocks(saved), *said, *([""] if said else [])]

    lines += [line for step in selection.before for line in step_lines(step)]
    lines += selection_blocks(selection, saved, summary, root, str(figure))
    lines += [line for step in selection.after for line in step_lines(step)]
    return saved.get("commit"), lines


def draw_selection_curve(study: Study, saved: dict, out: Path, root: Path) -> None:
    """The protocol's AER at every checkpoint of the best trained arm, at the layer it was chosen at (from the start,
    at step 0), per gold set, with the baseline reference dotted."""
    selection, p = study.selection, study.selection.protocol
    if not (pick := S.chosen_at(selection, saved, trained_only=True)):
        return
    record, layer = saved["arms"][pick[0]], pick[2]
    start = S.at(p, saved["start"]["scores"], layer=layer) or saved.get("start_layers", {}).get(layer)
    aer = {int(step): S.at(p, scores, layer=layer) for step, scores in record["checkpoints"].items()}
    steps = sorted(step for step, a in aer.items() if a and all(g in a for g in selection.gold_sets))
    series = {g: ([0, *steps], [start[g], *(aer[step][g] for step in steps)]) for g in selection.gold_sets}
    baseline = S.baseline_of(selection)
    dotted = S.reference_values(baseline, selection.gold_sets, root) if baseline else {}
    title = f"{pick[0]} from {Path(selection.start).name}; dotted: {S.short_name(baseline) if baseline else 'none'}"
    checkpoint_curves(series, dotted, f"{title} ({p.encoding}, {p.method}, layer {layer})", out)
