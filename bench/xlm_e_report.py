"""Write bench/results/xlm-e.md (+ xlm-e/results.json and plots) from what bench/xlm-e.sh measured.

Reads each run's checkpoints (step and cumulative training FLOPs from trainer_state.json), its metrics, and
the Tatoeba / alignment results written for every checkpoint. Every number in the report comes from those
files. A section headed OBSERVATIONS in an existing report is kept as it is.
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

import torch
import yaml
from reporting import cpu_name, records  # bench/ is on sys.path when this script runs

from polyalign.checkpoint import checkpoint_dirs
from polyalign.evaluate.plots import plot_series

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RUNS = ("xlm", "xlm-e", "xlm-e-mono")
PAIRS = ("de-en", "en-fr")
OBSERVATIONS = "## Observations"


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
    return {"layer": a["layer"], "aer": a["aer"], "best_layer": best["layer"], "best_aer": best["aer"]}


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=Path, required=True)
    ap.add_argument("--evals", type=Path, required=True)
    ap.add_argument("--budget", type=float, required=True)
    args = ap.parse_args()

    runs = collect(args.runs, args.evals)
    figures = RESULTS / "xlm-e"
    figures.mkdir(parents=True, exist_ok=True)
    report = {
        "date": str(date.today()),
        "machine": f"{cpu_name()}, {torch.get_num_threads()} threads",
        "torch": torch.__version__,
        "budget_flops": args.budget,
        "runs": runs,
    }
    (figures / "results.json").write_text(json.dumps(report, indent=1) + "\n")

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

    md = RESULTS / "xlm-e.md"
    kept = ""
    if md.is_file() and OBSERVATIONS in md.read_text():
        kept = md.read_text().split(OBSERVATIONS, 1)[1]
    lines = [
        "# XLM-E vs XLM at equal training FLOPs (issue 5)",
        "",
        f"Machine: {report['machine']}, torch {report['torch']}; date {report['date']}. "
        f"Budget: {args.budget:.3g} training FLOPs per run (analytic count, forward + backward, logged by the "
        "trainer; `polyalign/flops.py`).",
        "",
        "Reproduce: `bench/xlm-e.sh " + f"{args.budget:g}" + "` (writes this file via `bench/xlm_e_report.py`).",
        "",
        "Protocol: English + the 14 XNLI languages (`bench/work/prepared-xnli15`, 32k SentencePiece, Tatoeba "
        "sentences excluded); all three runs from scratch, seed 0, 6 layers x hidden 384 (XLM-E: the "
        "discriminator; generator 2 layers, same width), 8192-token batches per objective per step, AdamW "
        "peak lr 7e-4, linear warmup 10% and linear decay to the run's own last step, bf16 autocast on CPU. "
        "Steps per run = budget / FLOPs per step (measured over the run's first 3 steps), a checkpoint every "
        "quarter of the run. Tatoeba-14: mean-pooled layer 4 of 6 (and the best layer), cosine nearest "
        "neighbour, acc@1 averaged over the 14 languages and both directions. AER: `polyalign evaluate "
        "alignment --method ot` at its default layer.",
        "",
        "| run | objectives | position bias | steps | tokens/s | last logged losses and accuracies |",
        "|---|---|---|---|---|---|",
    ]
    for name, run in runs.items():
        fm = run["final_metrics"]
        losses = ", ".join(f"{k} {v:.3f}" for k, v in fm.items() if not k.endswith("replaced"))
        lines.append(
            f"| {name} | {' + '.join(run['objectives'])} | {run['position_bias']} | {run['max_steps']} | "
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
    if not any(p[f"aer_{pair}"] for run in runs.values() for p in run["points"] for pair in PAIRS):
        lines += ["", "AER: not measured (no `polyalign evaluate alignment` in this checkout)."]
    lines += ["", OBSERVATIONS + (kept.rstrip() if kept else "\n\n(none yet)"), ""]
    md.write_text("\n".join(lines))
    print(f"wrote {md}")


if __name__ == "__main__":
    main()
