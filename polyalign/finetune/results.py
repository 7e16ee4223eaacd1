"""Results of fine-tuning runs: per-language mean ± standard deviation over seeds, the average over languages,
the cross-lingual transfer gap, and markdown + JSON tables."""

from __future__ import annotations

import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

from polyalign.io import atomic_write_text, write_json


def mean_std(values: list[float]) -> dict:
    """Mean and sample standard deviation (ddof=1; 0 for a single run), rounded to 2 decimals."""
    a = np.asarray(values, dtype=float)
    return {"mean": round(float(a.mean()), 2), "std": round(float(a.std(ddof=1)) if len(a) > 1 else 0.0, 2)}


def transfer_gap(scores: dict[str, float], source: str = "en") -> float | None:
    """English score minus the average of the other languages (ERNIE-M Table 7; XTREME's transfer gap)."""
    others = [v for lang, v in scores.items() if lang != source]
    if source not in scores or not others:
        return None
    return scores[source] - float(np.mean(others))


def class_baselines(train_labels: list[int], test_labels: dict[str, list[int]], classes: tuple[str, ...]) -> dict:
    """What an accuracy must beat, in percent per test language: chance (100 / classes) and the majority class of
    the training labels predicted for every test unit (its share of each test set)."""
    majority = int(np.bincount(train_labels, minlength=len(classes)).argmax())
    return {
        "majority_class": classes[majority],
        "chance": {lang: round(100 / len(classes), 2) for lang in test_labels},
        "majority": {
            lang: round(100 * float(np.mean(np.asarray(y) == majority)), 2) for lang, y in test_labels.items()
        },
    }


def summarise(
    task: str, metric: str, runs: list[dict], protocol: str, config: dict, features: dict, seconds: float
) -> dict:
    languages = list(runs[0]["test"])
    per_language = {}
    for lang in languages:
        per_language[lang] = mean_std([r["test"][lang][metric] for r in runs])
        for key in runs[0]["test"][lang]:
            if key != metric:
                per_language[lang][key] = round(float(np.mean([r["test"][lang][key] for r in runs])), 2)
    headline = [{lang: r["test"][lang][metric] for lang in languages} for r in runs]
    gaps = [transfer_gap(h) for h in headline]
    return {
        "task": task,
        "metric": metric,
        "protocol": protocol,
        "languages": languages,
        "per_language": per_language,
        "average": mean_std([float(np.mean(list(h.values()))) for h in headline]),
        "gap": None if gaps[0] is None else mean_std(gaps),
        "seeds": len(runs),
        "minutes": round(seconds / 60, 2),
        "features": features,
        "config": config,
        "runs": runs,
    }


def _cell(d: dict | None) -> str:
    if d is None:
        return "–"
    return f"{d['mean']:.1f} ± {d['std']:.1f}" if d.get("std") else f"{d['mean']:.1f}"


def task_markdown(result: dict, title: str) -> str:
    """One task: a row of per-language scores with the average and the gap, then the protocol."""
    langs = result["languages"]
    head = ["", *langs, "avg", "gap"]
    row = [
        f"{result['metric']} (%)",
        *(_cell(result["per_language"][lang]) for lang in langs),
        _cell(result["average"]),
        _cell(result["gap"]),
    ]
    lines = [
        f"### {title}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        "| " + " | ".join(row) + " |",
    ]
    extra = [k for k in result["per_language"][langs[0]] if k not in ("mean", "std")]
    for key in extra:
        lines.append(
            "| "
            + " | ".join([f"{key} (%)", *(f"{result['per_language'][lang][key]:.1f}" for lang in langs), "", ""])
            + " |"
        )
    baselines = result.get("baselines") or {}  # what an accuracy must beat (class_baselines)
    for key, name in (("chance", "chance"), ("majority", f"majority class ({baselines.get('majority_class')})")):
        if baselines:
            values = [baselines[key][lang] for lang in langs]
            row = [f"{name} (%)", *(f"{v:.1f}" for v in values), f"{np.mean(values):.1f}", ""]
            lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        f"Protocol: {result['protocol']}",
        "",
        f"Time: {result['minutes']:.1f} min in all ({result['seeds']} seed(s); per seed "
        + ", ".join(f"{r['seconds'] / 60:.1f}" for r in result["runs"])
        + " min, of which training "
        + ", ".join(f"{r['train_seconds'] / 60:.1f}" for r in result["runs"])
        + f" min). Training features: {result['features']['train']}. Selected steps: "
        + ", ".join(f"{r['selected_step']}/{r['steps']}" for r in result["runs"])
        + ".",
        "",
    ]
    return "\n".join(lines)


def summary_markdown(results: list[dict], title: str) -> str:
    """Several tasks: one line each (English, average, gap, seeds, time)."""
    lines = [
        f"## {title}",
        "",
        "| task | metric | en | avg | gap | languages | seeds | minutes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['task']} | {r['metric']} | {_cell(r['per_language'].get('en'))} | {_cell(r['average'])} | "
            f"{_cell(r['gap'])} | {len(r['languages'])} | {r['seeds']} | {r['minutes']:.1f} |"
        )
    lines.append("")
    return "\n".join(lines)


def invoked_command() -> str:
    """The command line this process was started with, as a user would retype it."""
    return shlex.join(["polyalign", *sys.argv[1:]])


def code_version() -> str:
    """The commit of the polyalign checkout that runs (`+dirty` with local changes), else the package version."""
    root = Path(__file__).resolve().parents[2]
    git = lambda *args: subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()  # noqa: E731
    try:
        head = git("rev-parse", "--short", "HEAD")
    except OSError:
        head = ""
    if head:
        return f"commit {head}" + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    return f"polyalign {metadata.version('polyalign')}"


def write_results(
    out: str | Path,
    name: str,
    results: list[dict],
    title: str,
    model: str,
    command: str,
    code: str | None = None,
    step: int | None = None,
) -> tuple[Path, Path]:
    """`OUT/NAME.json` (everything, runs included) and `OUT/NAME.md` (the tables and protocols), both naming the
    model and its training `step` (None: not a checkpoint), the command that produced them and the code it ran
    (`code`, default: `code_version()`)."""
    out = Path(out)
    code = code or code_version()
    at = "" if step is None else f", step {step}"
    parts = [f"# {title}", "", f"Produced by `{command}` ({code}).", "", f"Model: `{model}`{at}", ""]
    if len(results) > 1:
        parts.append(summary_markdown(results, "Summary"))
    parts += [task_markdown(r, f"{r['task']} ({r['setting']})") for r in results]
    md = out / f"{name}.md"
    atomic_write_text(md, "\n".join(parts))
    js = out / f"{name}.json"
    write_json(js, {"model": model, "step": step, "command": command, "code": code, "results": results})
    return md, js
