"""Plots people would rather look at than read: metric against layer, metric against compute."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_series(
    series: dict[str, tuple[list, list]], out: str | Path, xlabel: str, ylabel: str, title: str, xscale: str = "linear"
) -> Path:
    """One line per named series of (x values, y values); writes a PNG."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xscale(xscale)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.tmp-{os.getpid()}.png")  # renamed into place whole
    fig.savefig(partial, metadata={"Title": title})  # in the file too, readable without the pixels
    plt.close(fig)
    os.replace(partial, out)
    return out
