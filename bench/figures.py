"""The figures of the pages bench/page.py writes: layer sweeps, metric against compute, fine-tuning curves."""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.measures import METRICS, current_key
from bench.study import Study
from polyalign.evaluate.plots import plot_series


def current_sweep(seed: dict, key: str) -> list[float] | None:
    """A seed's layer sweep, or None for an AER sweep measured under a stale protocol (never drawn)."""
    if key.startswith("sweep/aer-") and seed.get(current_key(key)) is not True:
        return None
    return seed.get(key)


def flop_curves(study: Study, loaded: dict, out: Path) -> list[Path]:
    """Metric vs training FLOPs (XLM-E Fig. 1's shape): every FLOP-budget family, one line per arm."""
    families: dict[tuple[str, str], dict[str, list[tuple[float, float]]]] = {}
    for c in study.comparisons:
        if not c.setup.budget.max_flops or (section := loaded.get(c.section)) is None:
            continue
        for arm in c.arms:
            points = [
                (s["train"]["flops"], s[c.metric])
                for s in section["results"].get(arm.name, {}).values()
                if c.metric in s
            ]
            if points:
                point = (statistics.mean(p[0] for p in points), statistics.mean(p[1] for p in points))
                families.setdefault((c.paper, c.metric), {}).setdefault(arm.name, []).append(point)
    paths = []
    for (paper, metric), series in families.items():
        data = {
            name: ([p[0] for p in sorted(set(pts))], [p[1] for p in sorted(set(pts))]) for name, pts in series.items()
        }
        ylabel = METRICS[metric][1].split(",")[0].split(" (")[0]
        paths.append(
            plot_series(
                data,
                out / f"{paper.lower()}-{metric.replace('@', '-')}-flops.png",
                "training FLOPs",
                ylabel,
                f"{paper}: {metric}",
            )
        )
    return paths


def section_curves(name: str, section: dict, out: Path) -> list[Path]:
    """Layer sweeps (Tatoeba-14, OT AER) and fine-tuning curves of seed 0 of every arm."""
    paths = []
    for key, ylabel in (("sweep/tatoeba14", "Tatoeba-14 acc@1"), ("sweep/aer-ot", "AER (OT)")):
        sweeps = {arm: current_sweep(s["0"], key) for arm, s in section["results"].items() if "0" in s}
        if series := {arm: (list(range(len(sweep))), sweep) for arm, sweep in sweeps.items() if sweep}:
            path = out / f"{name}-{key.split('/')[1]}-layers.png"
            paths.append(plot_series(series, path, "layer (0 = embeddings)", ylabel, f"{name}: {ylabel} by layer"))
    curves = {
        f"{arm} ({key.removeprefix('curve/mt-')} init)": ([p["step"] for p in c], [p["loss"] for p in c])
        for arm, s in section["results"].items()
        for key, c in s.get("0", {}).items()
        if key.startswith("curve/mt-")
    }
    if curves:
        paths.append(plot_series(curves, out / f"{name}-translation-loss.png", "step", "training loss", "de-en"))
    return paths
