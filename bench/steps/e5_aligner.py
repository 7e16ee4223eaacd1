"""The e5 study's steps on the aligner as a user runs it, after the selection's:

- `fit`: `polyalign fit-aligner` as a user runs it, on each gold set's own sentences (src.txt and tgt.txt, the
  languages from the folder's name; no gold link is read), from the start and from the offered model, each scored on
  the whole set and its halves. Transductive, as eflomal is: these models have read the sentences they are scored
  on, so they are reported apart from the selection.
- `aligner-speed` (answered; its code at commit 1936717): the offered model, layer and method against eflomal at
  2,000 and 20,000 pairs and SimAlign at 500 (installed in SIMALIGN), and the encoder's MFU; its blocks draw
  ALIGNER_SPEED.
"""

from __future__ import annotations

from pathlib import Path

from bench import selection as S
from bench.reporting import Block, read_json

ALIGNER_SPEED = "bench/results/aligner_speed.json"
SIMALIGN = "bench/work/simalign"
"""Where SimAlign is installed for the speed step: `pip install --no-deps -t bench/work/simalign simalign`."""
SPEED_COMMAND = "flock /tmp/polyalign-cpu.lock python -m bench.run e5 aligner-speed"
TRANSDUCTIVE = (
    "transductive: these models have read (without gold links) the sentences they are scored on, as eflomal does"
)
FITS = {"start": "the start", "offered": "the offered model"}
UNREAD = "argmax"
"""How a fit recorded before readings existed was read (the generic default: `Reading().describe()`)."""


# ---------------------------------------------------------------------------------------------------------
# fit


def fit(run) -> None:
    """`polyalign fit-aligner` from the start and from the offered model on every gold set's own sentences."""
    fit_from(run, "start", run.path(run.selection.start))
    fit_from(run, "offered", run.chosen_folder())


def fit_from(run, label: str, model: Path) -> None:
    from polyalign.align.aer import read_gold
    from polyalign.align.reading import read_reading
    from polyalign.align.words import parse_pharaoh

    relative, reading = str(model.relative_to(run.root)), read_reading(model).describe()
    record = run.results.setdefault("fit", {}).get(label, {})
    if (record.get("model"), record.get("reading", UNREAD)) != (relative, reading):  # fitted again, in new folders
        record = run.results["fit"][label] = {"model": relative, "reading": reading, "sets": {}}
    for name in (g for g in run.selection.gold_sets if g not in record["sets"]):  # what the JSON holds is kept
        folder = run.path(run.selection.gold) / name
        out = run.path(run.selection.runs) / "fit" / f"{model.name}-{reading.replace(' ', '').replace(',', '-')}" / name
        gold = read_gold(folder)
        if not (out / "links.txt").is_file():
            src, tgt = gold.languages
            run.sh("fit-aligner", "--model", str(model), "--src", str(folder / "src.txt"), "--tgt",
                   str(folder / "tgt.txt"), "--src-lang", src, "--tgt-lang", tgt, "--out", str(out),
                   "--no-progress")  # fmt: skip
        if run.print_only:
            continue
        lines = (out / "links.txt").read_text(encoding="utf-8").splitlines()
        record["sets"][name] = S.half_aers(gold, [parse_pharaoh(line) for line in lines])
        record["sets"][name]["fit"] = read_json(out / "fit.json")
        run.save()


def fit_blocks(saved: dict, gold_sets: tuple[str, ...], protocol) -> list[Block]:
    """The fitted models on each set, apart and labelled; beside them the start as it is, under the protocol."""
    fits = saved.get("fit", {})
    start = S.at(protocol, saved.get("start", {}).get("scores", {})) or {}
    rows = [(f"{FITS['start']}, not fitted (whole sets)", *(start.get(g, S.MISSING) for g in gold_sets))]
    for label, words in FITS.items():
        record = fits.get(label)
        if not record or not record.get("sets"):
            rows.append((f"{words} fitted on each set: not run", *(S.MISSING for _ in gold_sets)))
            continue
        sets, reading = record["sets"], record.get("reading", UNREAD)
        for half, what in (("all", "whole sets"), (S.DEV, "dev halves"), (S.TEST, "test halves")):
            cells = (sets.get(g, {}).get(half, S.MISSING) for g in gold_sets)
            rows.append((f"{words} fitted on each set, read {reading} ({what})", *cells))
        minutes = [sets[g]["fit"].get("minutes") if g in sets else None for g in gold_sets]
        rows.append((f"{words}: minutes to fit and align", *(S.MISSING if m is None else f"{m:.1f}" for m in minutes)))
    text = (
        f"**{TRANSDUCTIVE}.** `polyalign fit-aligner` as a user runs it (`--src`, `--tgt` and the languages of each "
        "gold set's folder, everything else its defaults: one pass of self-training, halfway back to its start, "
        "read as its folder's alignment.json says, as named in each row), once per gold set on that set's own "
        "sentences, then scored against its gold links; "
        "no gold link is read. Not a candidate of the selection above and not comparable with its rows: AER (%), "
        f"the start as it is for scale (the protocol). Data: `bench/results/e5.json` (`fit`)."
    )
    return [Block("The aligner fitted to the bitext it aligns (transductive)", (text,), ("model", *gold_sets),
                  tuple(rows))]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# aligner-speed


def read_speed(root: Path) -> dict | None:
    path = root / ALIGNER_SPEED
    return read_json(path) if path.is_file() else None


def speed_rows(speed: dict) -> list[tuple]:
    rows = []
    for key, what in (("eflomal_2000", "eflomal, 2,000 pairs"), ("eflomal_20000", "eflomal, 20,000 pairs"),
                      ("simalign_500", "SimAlign, 500 pairs")):  # fmt: skip
        if not (r := speed.get(key)):
            continue
        ours, theirs = r["polyalign"]["pairs_per_s"], r["eflomal" if key.startswith("eflomal") else "simalign"]
        mfu = r.get("utilisation", {}).get("mfu")
        cells = (f"{ours:.0f}", f"{theirs['pairs_per_s']:.1f}", f"{ours / theirs['pairs_per_s']:.1f}x")
        rows.append((what, *cells, S.MISSING if mfu is None else f"{100 * mfu:.1f}%"))
    return rows


def aligner_speed_blocks(speed: dict | None) -> list[Block]:
    """Pairs/s of `polyalign align` against eflomal and SimAlign, and the encoder's MFU, from ALIGNER_SPEED."""
    heading = "The aligner's speed against eflomal and SimAlign"
    if not speed:
        return [Block(heading, (f"Not measured on this page: `{SPEED_COMMAND}` writes `{ALIGNER_SPEED}` (SimAlign "
                                f"where it is installed in `{SIMALIGN}`: `pip install --no-deps -t {SIMALIGN} "
                                "simalign`), and the page shows it.",))]  # fmt: skip
    text = (
        f"Whole commands in their own processes, start-up included, on tokenised en-de pairs ({speed.get('threads')} "
        f"threads; `polyalign align {' '.join(speed.get('options', []))}`; bench/perf/aligner_speed.py, "
        f"`{ALIGNER_SPEED}`): eflomal trains on the same pairs (both directions) within its time; SimAlign 0.4 "
        "(argmax, layer 8) runs the same model exported by `polyalign export`, polyalign the same setting. MFU: the "
        "encoder's linear FLOPs up to the aligned layer over polyalign's wall time, against the best bf16 matmul rate "
        "at the model's shapes on this machine."
    )
    header = ("against", "polyalign pairs/s", "theirs pairs/s", "polyalign / theirs", "polyalign MFU")
    return [Block(heading, (text,), header, tuple(speed_rows(speed)))]
