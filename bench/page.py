"""The one drawer: every page under bench/results from its saved JSON.

`python -m bench.run NAME --page` draws NAME's page again. Every page opens with its title, the command and the
commits that made it; then its body. A comparison study's: one table row per comparison (the paper's number, baseline
and method over seeds, the paired difference, the verdict), the study's own tables, for each comparison that is not
reproduced what stands in its way (bench/verdict.py: premises, floors, diagnostics, the rule's reading), the notes
people wrote (bench/studies/notes/STUDY.json, each naming its commit), and the figures. A runner's record (bench/run.py:
a step's, or the GPU check's calls) is one table of steps, then a section per step with its parts. A perf bench's
record (`save_page`) and a retired one (its code left the tree; the JSON names the commit that holds it) keep their
page as lines and tables in their JSON. No other module writes a page.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench import verdict as V
from bench.budget import budget_table
from bench.figures import current_sweep, flop_curves, section_curves
from bench.measures import METRICS
from bench.reporting import Block, fmt, note, page_data, page_text, provenance, read_json, table, write_json
from bench.studies import STUDIES
from bench.study import Comparison, Study

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT / "bench" / "studies" / "notes"


def values_text(values: list[float] | None) -> str:
    if not values:
        return "-"
    mean = statistics.mean(values)
    return f"{mean:.2f}" + (" (" + ", ".join(f"{v:.2f}" for v in values) + ")" if len(values) > 1 else "")


def cell(values: list) -> str:
    """A table cell: integers as they are, large numbers in 3 significant digits, others as values_text."""
    if len(values) == 1 and isinstance(values[0], int):
        return str(values[0])
    if len(values) == 1 and isinstance(values[0], float) and abs(values[0]) >= 1e5:
        return f"{values[0]:.3g}"
    return values_text([v for v in values if isinstance(v, int | float)])


def difference_text(row: dict) -> str:
    if row["difference"] is None:
        return "-"
    spread = f" ± {row['spread']:.2f}" if row["spread"] is not None else ""
    return f"{row['difference']:+.2f}{spread} ({row['seeds']} seed{'s' if row['seeds'] > 1 else ''})"


def numbers_text(numbers: list[float]) -> str:
    """`first -> last` for a logged metric (3 decimals), the value for a measured one (2)."""
    return " -> ".join(f"{v:.3f}" for v in numbers) if len(numbers) > 1 else f"{numbers[0]:.2f}"


def protocol(c: Comparison) -> str:
    start = f"from {c.setup.start}" if c.setup.start else "from scratch"
    start += f", preset {c.method.preset}" if c.method.preset else ""
    languages = "all languages" if c.setup.languages is None else "languages " + ",".join(c.setup.languages)
    arms = " vs ".join(f"{a.name} ({a.recipe or 'no training'})" for a in (c.baseline, c.method))
    return f"{arms}; {start}; {c.setup.budget.label()}; {languages}"


def budget_text(c: Comparison) -> str:
    return c.setup.budget.label().replace(" training FLOPs", " FLOPs")


# --------------------------------------------------------------------------------------------------------
# What stands in the way of a comparison that is not reproduced: the data, the rule's reading, the note

SCALE, CODE, NOT_SEPARATED = "scale", "code suspect", "code or scale not separated"
"""What a reading may conclude: the model (scale) stands in the way, the code is suspect, or neither is shown."""
WORDS = {
    V.R.DEPARTURE_EXPLAINS: "the departure, not the code",
    V.R.DEPARTURE_DOES_NOT: "the departure does not explain it",
    V.R.PREMISE_NOT_MET: "premise not met: {parts}",
    V.R.AT_FLOOR: f"every model at its unigram floor: {SCALE}",
    V.R.AT_FLOOR_GAP_GROWS: f"every model at its unigram floor, gap grows with compute: {NOT_SEPARATED}",
    V.R.STILL_FALLING: "every model at its unigram floor, but losses still fall in the run's last quarter ({ids}): "
    "budget (a longer run first, not yet scale)",
    V.R.LOSS_FALLS: f"the method's loss falls: {NOT_SEPARATED}",
    V.R.LOSS_FLAT: f"a loss of the method does not fall: {CODE}",
    V.R.NO_LOSS: "no logged loss: not measured",
    V.R.DIAGNOSTICS_DISAGREE: f"diagnostics disagree: {NOT_SEPARATED}",
    V.R.DIAGNOSTIC_REPRODUCED: "{met}, reproduced: " + SCALE,
    V.R.DIAGNOSTIC_GAP_CLOSES: f"trails, gap closes with compute: {NOT_SEPARATED}, trend to {SCALE}",
    V.R.DIAGNOSTIC_TRAILS: CODE,
    V.R.DIAGNOSTIC_OTHER: "{met}, {1}",
    V.R.GAP_IN: "gap in the {0}",
    V.R.GAP_NOT_IN: "gap not in the {0}",
    V.R.GAP_NOT_ONLY_IN: "gap not only in the {0}",
    V.R.NO_GAP_TO_PLACE: "no gap without to place ({0})",
    V.R.INDEPENDENT_ALIKE: "independent implementation ends alike: not the code",
    V.R.INDEPENDENT_OTHERWISE: f"independent implementation ends otherwise: {CODE}",
    V.R.READ: "read",
    V.R.NOT_MEASURED: "not measured",
    V.R.STALE_NOT_READ: "stale: not read",
    V.R.DEPARTS_NOT_READ: "departs from the paper: not read",
    V.R.UNMET_NOT_READ: "premise not met, not reproduced: not read",
}
"""A reading's code in words: {0}, {1} its parameters, {met} whether a diagnostic's premise held, {ids} the
diagnostics it names, {parts} the readings it rests on."""


def words(reading: V.Reading) -> str:
    """A reading as the page says it: its code's words, then the reading read beside it."""
    met = "premise met" if reading.args[:1] == (True,) else "premise not met either"
    parts = "; ".join(map(words, reading.parts)) or SCALE
    said = WORDS[reading.code].format(*reading.args, met=met, ids=", ".join(map(str, reading.args)), parts=parts)
    return said + (f"; {words(reading.also)}" if reading.also else "")


def checks_table(c: Comparison, section: dict) -> list:
    floors, rows = section.get("floors", {}), []
    for check in c.why.checks:
        numbers = V.check_numbers(check, section)
        against = [check.reference] if check.reference else []
        if numbers and check.floor in floors:
            against.append(f"unigram floor {floors[check.floor]:.2f} nats")
        if numbers and (majority := V.majority_of(check, section)) is not None:
            against.append(f"majority class {majority:.3f}")
        if check.premise_max is not None:
            against.append(f"premise: at most {check.premise_max:g}")
        held = V.premise(check, section, floors)
        state = "-" if held is None else "held" if held[3] else "not met"
        value = numbers_text(numbers) if numbers else "not measured"
        rows.append([check.label, f"`{check.arm}`", value, "; ".join(against) or "-", state])
    header = ["check (seed 0)", "arm", "value (first -> last 10 logged)", "held against", "premise"]
    return [table(header, rows)] if rows else [""]


def investigation(study: Study, c: Comparison, rows: dict, loaded: dict, notes: dict, root: Path = ROOT) -> list[str]:
    section, row = loaded[c.section], rows[c.id]
    lines = [f"### {c.id}: {c.statement}", ""]
    lines.append(
        f"- Decisive metric: {METRICS[c.metric][1]} ({row['direction']} is the paper's way); "
        f"method - baseline {difference_text(row)}."
    )
    same = V.same_comparison(study, c)
    if len(same) > 1:
        moves = ", ".join(
            f"{budget_text(x)} {difference_text(r) if r['difference'] is not None else r['verdict']}"
            for x, r in ((x, rows[x.id]) for x in same)
        )
        lines.append(f"- Across budgets (method - baseline): {moves}.")
    if c.metric.startswith("aer-ot"):
        sweeps = [
            (arm, current_sweep(V.seed0(section, arm), "sweep/aer-ot"))
            for arm in dict.fromkeys(["start", *(a.name for a in c.arms)])
        ]
        if shown := [f"{arm} " + " / ".join(f"{v:.1f}" for v in s) for arm, s in sweeps if s]:
            lines.append(f"- AER by layer (0 = embeddings; seed 0): {'; '.join(shown)}.")
    if c.why.code:
        files = " ".join(sorted({t.split("::")[0] for t in c.why.code}))
        lines.append(
            "- Code: tests that fail when the mechanism is wired otherwise than the paper: "
            + ", ".join(f"`{t.split('::')[1]}`" for t in c.why.code)
            + f" (`python -m pytest {files}`)."
        )
    lines += ["", *checks_table(c, section)]
    diagnostics, _ = V.diagnostic_lines(study, c, rows, loaded)
    if diagnostics:
        body = []
        for d in diagnostics:
            dc, drow = d["diagnostic"], d["row"]
            section_d = loaded.get(dc.section, {"results": {}})
            held = [
                (ch.label, p) for ch in dc.why.checks if (p := V.premise(ch, section_d, section_d.get("floors", {})))
            ]
            premises = "; ".join(
                f"{label} {v:.3f} ({against} {x:{'.3f' if against.startswith('above') else '.2f'}}): "
                + ("held" if ok else "not met")
                for label, (v, against, x, ok) in held
            )
            body.append(
                [
                    f"`{dc.id}`: {dc.statement}",
                    protocol(dc),
                    difference_text(drow) if drow else "-",
                    drow["verdict"] if drow else V.NOT_RUN,
                    premises or "-",
                    words(d["read"]),
                ]
            )
        lines += [
            table(
                ["diagnostic", "protocol", "method - baseline", "verdict", "premises (seed 0, last 10 logged)", "read"],
                body,
            ),
        ]
    independent = None
    if c.why.independent and (path := root / c.why.independent).is_file():
        independent = json.loads(path.read_text())
        states, _ = V.independent_states(independent)
        lines.append(
            f"- Independent implementation (`{Path(c.why.independent).with_suffix('.md')}`): MRTD from scratch, both "
            f"on the same {independent['steps']} batches of {independent['max_tokens']} tokens, unigram floor "
            f"{independent['unigram_floor']:.2f}."
        )
        body = [
            [n, f"{s['accuracy']:.3f}", f"{s['majority']:.3f}", s["since"] or "-", f"{s['generator_loss']:.2f}"]
            for n, s in states.items()
        ]
        lines += [
            "",
            table(
                ["implementation", "discriminator accuracy", "majority class", "above it from step", "generator loss"],
                body,
            ),
        ]
    lines.append(f"- Reading (rule, bench/verdict.py): {words(V.reading(study, c, rows, loaded, independent))}.")
    return [*lines, *note(notes, c.id), ""]


# --------------------------------------------------------------------------------------------------------


def minutes_table(loaded: dict) -> list:
    """Wall minutes of every run: training (its log's seconds) and each measure bench.run timed (runs measured
    before it kept minutes.json show '-'); a run shared by sections is listed once."""
    body, seen = [], set()
    for name, section in loaded.items():
        for arm, seeds in section["results"].items():
            for seed, result in seeds.items():
                train = result.get("train", {}).get("seconds")
                measured = result.get("minutes", {})
                key = (arm, seed, train, tuple(sorted(measured.items())))
                if key in seen or (train is None and not measured):
                    continue
                seen.add(key)
                total = (train or 0) / 60 + sum(measured.values())
                parts = ", ".join(f"{m} {v:.1f}" for m, v in sorted(measured.items())) or "-"
                body.append([f"{name}: `{arm}`", seed, fmt(train / 60 if train else None), parts, f"{total:.1f}"])
    if not body:
        return []
    header = ["section: arm", "seed", "training", "measures (timed by bench.run)", "total"]
    return ["## Wall minutes per run (2 CPU threads)", "", table(header, body)]


def write(study: Study, results: Path, command: str, notes_dir: Path = NOTES, root: Path = ROOT) -> Path:
    """The study's page: its title, the command and the commits that made it, then its body, drawn by the one
    table writer."""
    notes = json.loads(path.read_text()) if (path := notes_dir / f"{study.name}.json").is_file() else {}
    runs_from, lines = comparison_body(study, results, notes, root, provenance(command))
    page = results / f"{study.name}.md"
    text = page_text([f"# {study.title}", "", provenance(command, runs_from), "", *lines])
    page.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    return page


def comparison_body(study: Study, results: Path, notes: dict, root: Path, produced: str) -> tuple[str | None, list]:
    """A comparison study's page below its provenance line (the commits of its runs, the lines), from the saved
    sections; writes STUDY/verdicts.json and the figures beside it."""
    loaded = {p.stem: json.loads(p.read_text()) for p in sorted((results / study.name / "sections").glob("*.json"))}
    rows = {c.id: V.comparison_row(c, loaded.get(c.section)) for c in study.comparisons}
    figures = results / study.name
    plots = flop_curves(study, loaded, figures)
    for name, section in loaded.items():
        plots += section_curves(name, section, figures)
    drawn = ("-layers.png", "-flops.png", "-translation-loss.png")
    for old in {p for p in figures.glob("*.png") if p.name.endswith(drawn)} - set(plots):  # no longer drawn
        old.unlink()
    saved = sorted(p for p in figures.rglob("*.png") if p not in plots)  # drawn by the runs themselves
    codes = sorted({code for s in loaded.values() for code in s["code"].split(", ")})
    lines = [
        *note(notes, "_page"),
        "",
    ]
    lines += [
        f"Sections: {', '.join(study.sections())}; run one with "
        f"`flock /tmp/polyalign-cpu.lock python -m bench.run {study.name} SECTION`.",
        "",
    ]
    header = ["claim", "paper's number", "metric", "baseline", "method", "difference", "verdict", "protocol"]
    body = [
        [
            f"{c.paper} `{c.id}`: {c.statement}",
            c.paper_number,
            c.metric if c.metric == c.base_metric else f"{c.metric} vs {c.base_metric}",
            values_text(rows[c.id]["baseline"]),
            values_text(rows[c.id]["method"]),
            difference_text(rows[c.id]),
            rows[c.id]["verdict"],
            protocol(c),
        ]
        for c in study.comparisons
    ]
    used = {k for c in study.comparisons for k in (c.metric, c.base_metric, *c.measures)}
    sources = sorted({(s["command"], s["source"]) for s in loaded.values() if "source" in s})
    lines += [f"Measured by `{c}` (a script of its own); the numbers are read from {x}.\n" for c, x in sources]
    lines += [
        table(header, body),
        "Metrics: " + "; ".join(f"`{k}` {v[1]}" for k, v in METRICS.items() if k in used) + ".",
        "",
    ]
    for title, keys in study.tables:
        arms = [(name, arm, seeds) for name, s in loaded.items() for arm, seeds in s["results"].items()]
        body = [
            [f"{name}: `{arm}`", *(cell(V.seed_values({"results": {arm: seeds}}, arm, k)) for k in keys)]
            for name, arm, seeds in arms
        ]
        body = [row for row in body if any(c != "-" for c in row[1:])]  # arms the table's measures never read
        lines += [f"## {title}", "", table(["section: arm", *keys], body)]
    lines += minutes_table(loaded)
    lines += budget_table(loaded)
    failed = [c for c in study.comparisons if rows[c.id]["verdict"] == V.NOT_REPRODUCED]
    if failed:
        lines += ["## Investigation of what was not reproduced", ""]
        for c in failed:
            lines += investigation(study, c, rows, loaded, notes, root)
    others = [c for c in study.comparisons if c not in failed and c.id in notes]
    if others:
        lines += ["## Notes on the other rows", ""]
        for c in others:
            lines += [f"### {c.id}: {c.statement} ({rows[c.id]['verdict']})", "", *note(notes, c.id), ""]
    if plots or saved:
        lines += ["## Figures", "", *(f"![{p.stem}]({p.relative_to(results)})" for p in [*plots, *saved]), ""]
    json_rows = [rows[c.id] | {"protocol": protocol(c)} for c in study.comparisons]
    write_json(results / study.name / "verdicts.json", {"provenance": produced, "rows": json_rows})
    return ", ".join(codes) if codes else None, lines


# --------------------------------------------------------------------------------------------------------
# Records: a runner's (steps and their parts), or a bench's or retired page's lines and tables


def draw(name: str, results: Path = ROOT / "bench" / "results") -> Path:
    """NAME's page again from its JSON: a study's, or a record's (a path under `results` without its suffix)."""
    if name in STUDIES:
        return write(STUDIES[name], results, f"python -m bench.run {name} --page")
    if not (results / f"{name}.json").is_file():
        raise SystemExit(f"{name}: no study and no record {results / name}.json")
    return draw_record(results / f"{name}.json")


def draw_record(file: Path) -> Path:
    """The page of a record, beside its JSON."""
    page = file.with_suffix(".md")
    page.write_text(record_text(read_json(file)), encoding="utf-8")
    return page


def save_page(file: Path, record: dict, parts: list[str | Block]) -> Path:
    """A bench's record (a perf bench's measurements) saved with its page as data, and the page drawn from it."""
    write_json(file, record | {"page": page_data(parts)})
    return draw_record(file)


def record_text(r: dict) -> str:
    if "page" in r:  # a bench's or a retired page: its lines, and its tables as data
        return page_text(
            [p if isinstance(p, str) else table(p["header"], p["rows"], p.get("align", "")) for p in r["page"]]
        )
    return page_text(check_parts(r))


TABLE_STEPS = {"throughput"}  # steps whose parts are arms measured alike: a table; the others a list


def check_parts(r: dict) -> list[str | Block]:
    """A runner's record: its steps, each with its status, seconds and budget, then a section per step with a
    table of its parts (arms measured alike) or a line per part."""
    steps = [[s["title"], s["status"], f"{s.get('seconds', 0):.0f}", f"{s.get('budget_s', 0):.0f}"] for s in r["steps"]]
    lines = [
        f"# {r.get('title', 'GPU check')}" + (" (dry run: CPU, tiny sizes; not a measurement)" if r["dry_run"] else ""),
        "",
        f"`{r['command']}` at {r['code']}, {r['date']} on {r['host']}, {r['seconds']:.0f} s in all.",
        "",
        table(["step", "status", "seconds", "budget"], steps, align="llrr"),
    ]
    for s in r["steps"]:
        lines += [f"## {s['title']}: {s['status']}", ""]
        lines += [f"{note}." if not note.endswith(".") else note for note in s.get("notes", [])]
        if s.get("notes"):
            lines.append("")
        lines += [part_table(s["parts"])] if s["name"] in TABLE_STEPS else [*part_list(s["parts"]), ""]
    return lines


def part_list(parts: dict) -> list[str]:
    """A line per part: its status, then its measurements."""
    return [
        f"- **{name}**: {p.get('status', '')}" + "".join(f"; {k} {part_cell(v)}" for k, v in p.items() if k != "status")
        for name, p in parts.items()
    ]


def part_table(parts: dict) -> Block:
    """A row per part (arms measured alike), a column per measurement."""
    columns = ["status", *dict.fromkeys(k for p in parts.values() for k in p if k != "status")]
    rows = [[name, *(part_cell(p.get(k, "")) for k in columns)] for name, p in parts.items()]
    return table(["part", *columns], rows, align="ll" + "r" * (len(columns) - 1))


def part_cell(value) -> str:
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value).replace("|", "/")
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"
