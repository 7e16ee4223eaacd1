"""Write bench/results/xlm-e.md (+ xlm-e/results.json and plots) from what bench/xlm-e.sh measured.

Reads each run's checkpoints (step and cumulative training FLOPs from trainer_state.json), its metrics, and
the Tatoeba / alignment results written for every checkpoint, into xlm-e/results.json; the page, plots and
its reading are then written from that JSON alone, so `--from-json` rewrites them without the runs. Every
number and every statement in the reading is computed from the JSON; nothing is kept from an earlier page.
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

import torch
import yaml
from reporting import commit, cpu_name, records  # bench/ is on sys.path when this script runs

from polyalign.checkpoint import checkpoint_dirs
from polyalign.evaluate.plots import plot_series

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RUNS = ("xlm-e", "xlm-e-mono")  # `xlm` (MLM + TLM): bench/evidence.sh, sections xlm-e-*
PAIRS = ("de-en", "en-fr")
RUN_COMMAND = "bench/xlm-e.sh {budget:g}"
# results.json files written before the report recorded commits and encodings: the runs of 2026-11-21 ran with
# the code up to 0d6bcd6 (1c3dcfd added their results), when `evaluate alignment` encoded each side separately.
UNRECORDED_COMMITS = "up to 0d6bcd6 (not recorded; 1c3dcfd added the results)"
UNRECORDED_ENCODING = "separate"
EARLIER = "1e2ccae"  # the last commit whose page and results.json have the `xlm` run


def tatoeba_point(path: Path) -> dict | None:
    if not path.is_file():
        return None
    t = json.loads(path.read_text())
    best = max(t["sweep"], key=lambda r: r["tatoeba14"]["xx_to_en"] + r["tatoeba14"]["en_to_xx"])
    both = lambda r: (r["tatoeba14"]["xx_to_en"] + r["tatoeba14"]["en_to_xx"]) / 2  # noqa: E731
    reported = t["reported"]
    return {
        "layer": reported["layer"],
        "xx_to_en": reported["tatoeba14"]["xx_to_en"],
        "en_to_xx": reported["tatoeba14"]["en_to_xx"],
        "both": both(reported),
        "best_layer": best["layer"],
        "best_both": both(best),
    }


def alignment_point(path: Path) -> dict | None:
    if not path.is_file():
        return None
    a = json.loads(path.read_text())
    best = min(a.get("sweep") or [a], key=lambda r: r["aer"])
    return {
        "layer": a["layer"],
        "aer": a["aer"],
        "best_layer": best["layer"],
        "best_aer": best["aer"],
        "encoding": a["encoding"],  # `pair` (<s> S </s> T </s>, XLM-Align's evaluation) or `separate`
    }


def collect(runs: Path, evals: Path) -> dict:
    out = {}
    for name in RUNS:
        run = runs / name
        if not (run / "metrics.jsonl").is_file():
            continue
        recipe = yaml.safe_load((run / "recipe.yaml").read_text())
        recs = records(run / "metrics.jsonl")
        points = []
        for ckpt in checkpoint_dirs(run):
            state = json.loads((ckpt / "trainer_state.json").read_text())
            here = evals / name / ckpt.name
            points.append(
                {
                    "step": state["step"],
                    "flops": state["counters"]["flops"],
                    "tokens": state["counters"]["tokens"],
                    "seconds": state["counters"]["seconds"],
                    "tatoeba14": tatoeba_point(here / "tatoeba" / "tatoeba.json"),
                    **{f"aer_{p}": alignment_point(here / p / "alignment.json") for p in PAIRS},
                }
            )
        last = recs[-1]
        out[name] = {
            "objectives": [o["name"] for o in recipe["objectives"]],
            "position_bias": recipe["model"].get("position_bias", "none"),
            "absolute_positions": recipe["model"].get("absolute_positions", True),
            "max_steps": recipe["trainer"]["max_steps"],
            # per-objective losses and accuracies (an RTD objective's own "loss" is L_G + 50·L_D: left out)
            "final_metrics": {k: v for k, v in last.items() if "/" in k and not k.startswith(("mrtd/l", "trtd/l"))},
            "tokens_per_s": last["tokens"] / last["seconds"],
            "points": points,
        }
    return out


def series(report: dict, key) -> dict:
    s = {}
    for name, run in report.items():
        pts = [(p["flops"], key(p)) for p in run["points"] if key(p) is not None]
        if pts:
            s[name] = ([x for x, _ in pts], [y for _, y in pts])
    return s


def fmt(v, digits=1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def encodings(runs: dict) -> list[str]:
    """The alignment encodings the AER points were measured with (older JSON did not record them)."""
    found = {a.get("encoding", UNRECORDED_ENCODING) for r in runs.values() for p in r["points"] for a in aer_points(p)}
    return sorted(found)


def aer_points(point: dict) -> list[dict]:
    return [point[f"aer_{pair}"] for pair in PAIRS if point[f"aer_{pair}"]]


def reading(report: dict) -> list[str]:
    """What the tables show, stated from the numbers in `report` only (no cause that was not measured)."""
    runs = report["runs"]
    out = []
    scale = ", ".join(
        f"`{n}` {r['points'][-1]['step']} steps / {r['points'][-1]['tokens'] / 1e6:.2f}M tokens"
        for n, r in runs.items()
    )
    out.append(
        f"- Scale: {scale} per run (XLM-E §4.1 trains 125K steps of ~1M tokens per task). Every number below is "
        "one seed."
    )
    positions = ", ".join(
        f"`{n}` {'a learned absolute table' if r.get('absolute_positions', True) else 'no absolute table'}"
        + ("" if r["position_bias"] == "none" else f" and a {r['position_bias']} attention bias")
        for n, r in runs.items()
    )
    out.append(f"- Positions in the encoders that were trained: {positions}.")
    if any(r.get("absolute_positions", True) and r["position_bias"] != "none" for r in runs.values()):
        out.append(
            "  XLM-E §3.3 describes positions only as the gated relative bias of Eq. (7); the `xlm-e` recipes now "
            "set `absolute_positions: false`, so a new `bench/xlm-e.sh` run retrains them that way."
        )
    points = [p for r in runs.values() for p in r["points"] if p["tatoeba14"]]
    if points:
        best = sorted({p["tatoeba14"]["best_layer"] for p in points})
        out.append(
            f"- Tatoeba-14: the best layer of the {len(points)} checkpoints is "
            + " or ".join(f"L{b} ({sum(p['tatoeba14']['best_layer'] == b for p in points)})" for b in best)
            + "; at layer 4 the mean of both directions goes "
            + "; ".join(
                f"`{n}` {r['points'][0]['tatoeba14']['both']:.1f} -> {r['points'][-1]['tatoeba14']['both']:.1f}"
                for n, r in runs.items()
                if r["points"][0]["tatoeba14"] and r["points"][-1]["tatoeba14"]
            )
            + " (first -> last checkpoint). No cause of the differences between runs was measured."
        )
    for pair in PAIRS:
        moves = [
            f"`{n}` {r['points'][0][f'aer_{pair}']['aer']:.1f} -> {r['points'][-1][f'aer_{pair}']['aer']:.1f}"
            for n, r in runs.items()
            if r["points"][0][f"aer_{pair}"] and r["points"][-1][f"aer_{pair}"]
        ]
        if moves:
            out.append(f"- AER {pair} (first -> last checkpoint): " + "; ".join(moves) + ".")
    if encodings(runs) != ["pair"]:
        out.append(
            "- These AERs used the `separate` encoding (`<s> S </s>` and `<s> T </s>` encoded apart), not the pair "
            "encoding (`<s> S </s> T </s>`) of XLM-Align's evaluation that the papers' tables report: do not set "
            "them beside those tables. `bench/xlm-e.sh` now passes `--encoding pair`."
        )
    return out


def write_plots(runs: dict, figures: Path) -> list[Path]:
    plots = []
    t = lambda k: lambda p: p["tatoeba14"][k] if p["tatoeba14"] else None  # noqa: E731
    plots.append(
        plot_series(
            series(runs, t("both")),
            figures / "tatoeba_vs_flops.png",
            "cumulative training FLOPs",
            "Tatoeba-14 acc@1 (%), mean of both directions",
            "Tatoeba-14 at layer 4 of 6 against training compute",
        )
    )
    plots.append(
        plot_series(
            series(runs, t("best_both")),
            figures / "tatoeba_best_layer_vs_flops.png",
            "cumulative training FLOPs",
            "Tatoeba-14 acc@1 (%), best layer",
            "Tatoeba-14 at each checkpoint's best layer",
        )
    )
    for pair in PAIRS:
        s = series(runs, lambda p, pair=pair: p[f"aer_{pair}"]["aer"] if p[f"aer_{pair}"] else None)
        if s:
            plots.append(
                plot_series(
                    s,
                    figures / f"aer_{pair}_vs_flops.png",
                    "cumulative training FLOPs",
                    f"AER {pair} (%), lower is better",
                    f"Word alignment {pair} (OT, layer 4) against training compute",
                )
            )
    return plots


def render(report: dict, plots: list[Path], page_command: str) -> str:
    runs, budget = report["runs"], report["budget_flops"]
    encoding = " / ".join(encodings(runs)) or "-"
    lines = [
        "# XLM-E with and without TRTD at equal training FLOPs (issue 5)",
        "",
        f"Runs: `{RUN_COMMAND.format(budget=budget)}` (code of commits {report.get('commit', UNRECORDED_COMMITS)}; "
        f"{report['machine']}, torch {report['torch']}; {report['date']}). Page: `{page_command}` at commit "
        f"{commit()}. Budget: {budget:.3g} training FLOPs per run (analytic count, forward + backward, logged by "
        "the trainer; `polyalign/flops.py`).",
        "",
        "Protocol: English + the 14 XNLI languages (`bench/work/prepared-xnli15`, 32k SentencePiece, Tatoeba "
        "sentences excluded); both runs from scratch, seed 0, 6 layers x hidden 384 (XLM-E: the "
        "discriminator; generator 2 layers, same width), 8192-token batches per objective per step, AdamW "
        "peak lr 7e-4, linear warmup 10% and linear decay to the run's own last step, bf16 autocast on CPU. "
        "Steps per run = budget / FLOPs per step (measured over the run's first 3 steps), a checkpoint every "
        "quarter of the run. Tatoeba-14: mean-pooled layer 4 of 6 (and the best layer), cosine nearest "
        "neighbour, acc@1 averaged over the 14 languages and both directions. AER: `polyalign evaluate "
        f"alignment --method ot` at its default layer, `{encoding}` encoding.",
        "",
        "`xlm-e-mono` is XLM-E without TRTD (MRTD alone), the `-TRTD` rows of XLM-E Tables 3 and 4; the paper "
        "trains it with fewer FLOPs than XLM-E (6.3e19 vs 9.5e19, its Table 2), here both get the same budget. "
        "XLM-E against MLM + TLM at equal FLOPs is on `bench/results/evidence.md` (sections xlm-e-1/2/3 and "
        "xlm-e-xnli of `bench/evidence.sh`); this bench's own `xlm` run, removed in issue 19, is in git history: "
        f"`git show {EARLIER}:bench/results/xlm-e.md`.",
        "",
        "| run | objectives | absolute positions | position bias | steps | tokens/s "
        "| last logged losses and accuracies |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        fm = run["final_metrics"]
        losses = ", ".join(f"{k} {v:.3f}" for k, v in fm.items() if not k.endswith("replaced"))
        absolute = "yes" if run.get("absolute_positions", True) else "no"
        lines.append(
            f"| {name} | {' + '.join(run['objectives'])} | {absolute} | {run['position_bias']} | {run['max_steps']} | "
            f"{run['tokens_per_s']:.0f} | {losses} |"
        )
    lines += [
        "",
        "Each checkpoint (Tatoeba-14 acc@1 in %, AER in %, lower is better):",
        "",
        "| run | step | training FLOPs | train min | Tatoeba-14 xx→en (layer 4) | en→xx | mean | best layer: mean | "
        "AER de-en | AER en-fr |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        for p in run["points"]:
            tt = p["tatoeba14"] or {}
            aer = []
            for pair in PAIRS:
                a = p[f"aer_{pair}"]
                if a is None:
                    aer.append("–")
                else:
                    best = "" if a["best_layer"] == a["layer"] else f" (best {a['best_aer']:.1f} @ L{a['best_layer']})"
                    aer.append(f"{a['aer']:.1f} @ L{a['layer']}{best}")
            best = f"{fmt(tt.get('best_both'))} @ L{tt.get('best_layer')}" if tt else "–"
            lines.append(
                f"| {name} | {p['step']} | {p['flops']:.3g} | {p['seconds'] / 60:.1f} | {fmt(tt.get('xx_to_en'))} | "
                f"{fmt(tt.get('en_to_xx'))} | {fmt(tt.get('both'))} | {best} | {aer[0]} | {aer[1]} |"
            )
    lines += ["", "Plots against cumulative training FLOPs:", ""]
    lines += [f"![{p.stem}](xlm-e/{p.name})" for p in plots]
    if not any(aer_points(p) for run in runs.values() for p in run["points"]):
        lines += ["", "AER: not measured (no `polyalign evaluate alignment` in this checkout)."]
    lines += ["", "## Reading", "", *reading(report), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=Path, help="bench/xlm-e.sh's run folders (with --evals and --budget)")
    ap.add_argument("--evals", type=Path)
    ap.add_argument("--budget", type=float)
    ap.add_argument("--from-json", action="store_true", help="rewrite the page from xlm-e/results.json alone")
    args = ap.parse_args()
    figures = RESULTS / "xlm-e"
    if args.from_json:
        report = json.loads((figures / "results.json").read_text())
        page_command = "bench/xlm_e_report.py --from-json"
    else:
        if not (args.runs and args.evals and args.budget):
            ap.error("give --runs, --evals and --budget, or --from-json")
        report = {
            "date": str(date.today()),
            "machine": f"{cpu_name()}, {torch.get_num_threads()} threads",
            "torch": torch.__version__,
            "commit": commit(),
            "budget_flops": args.budget,
            "runs": collect(args.runs, args.evals),
        }
        figures.mkdir(parents=True, exist_ok=True)
        (figures / "results.json").write_text(json.dumps(report, indent=1) + "\n")
        page_command = "bench/xlm_e_report.py --runs ... (from bench/xlm-e.sh)"
    md = RESULTS / "xlm-e.md"
    md.write_text(render(report, write_plots(report["runs"], figures), page_command))
    print(f"wrote {md}")


if __name__ == "__main__":
    main()
