"""Write bench/results/preset.md, preset.json and preset/*.png from the runs of bench/preset_sweep.sh.

Every number comes from the runs' recipe.yaml, metrics.jsonl and final checkpoint. The measure is the MLM loss
(`mlm/loss`, the mean over each logged window of 5 steps) against training seconds (`seconds`): its mean over
the last 10% of a run's windows ranks the configs, and each curve is interpolated at common times. The reading
is generated from those numbers.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import numpy as np
import yaml
from reporting import machine, markdown_table, provenance, records, write_json  # bench/ is on sys.path

from polyalign.evaluate.plots import plot_series

ROOT = Path(__file__).resolve().parents[1]
LOSS = "mlm/loss"
TAIL = 0.1
"""The share of a run's last logged windows whose MLM loss is averaged into its final loss."""
QUARTERS = (0.25, 0.5, 0.75, 1.0)
"""Shares of the time budget at which every curve is read (1, 2, 3, 4 minutes with the default 4)."""


def settings(recipe: dict) -> dict:
    """What a config sets: the size, the lr and the tokens per stream and step (from the run's recipe.yaml)."""
    model, data, trainer = recipe["model"], recipe["data"], recipe["trainer"]
    return {
        "layers": model["num_layers"],
        "hidden": model["hidden_size"],
        "heads": model["num_heads"],
        "ffn": model["ffn_size"],
        "lr": trainer["lr"],
        "warmup_steps": trainer["warmup_steps"],
        "max_steps": trainer["max_steps"],
        "mono_tokens": data["mono"]["max_tokens"],
        "parallel_tokens": data["parallel"]["max_tokens"],
    }


def tail_loss(rows: list[dict], share: float = TAIL) -> dict:
    """Mean and standard deviation of the MLM loss over the last `share` of the logged windows (at least one)."""
    n = max(1, math.ceil(share * len(rows)))
    losses = [r[LOSS] for r in rows[-n:]]
    return {"mean": statistics.fmean(losses), "sd": statistics.stdev(losses) if n > 1 else 0.0, "windows": n}


def loss_at(rows: list[dict], seconds: float, slack: float = 1.0) -> float | None:
    """The MLM loss curve linearly interpolated at `seconds` of training; None outside the logged span (a run
    stops at the first log line past its budget, so its end may fall short of the budget by float noise: up to
    `slack` seconds past the end read the last value)."""
    xs, ys = [r["seconds"] for r in rows], [r[LOSS] for r in rows]
    if not xs or seconds < xs[0] or seconds > xs[-1] + slack:
        return None
    return float(np.interp(seconds, xs, ys))


def parameters(run: Path) -> dict:
    """Total parameters of the trained model (encoder and MLM head, the tied word embeddings counted once), and
    those outside its embedding tables (word, position, language, token type)."""
    import torch

    from polyalign.checkpoint import load_model

    model = load_model(run).model
    total = sum(p.numel() for p in model.parameters())
    embedding = sum(
        p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters(recurse=False)
    )
    return {"total": total, "non_embedding": total - embedding}


def summarize(run: Path, minutes: float) -> dict:
    rows = [r for r in records(run / "metrics.jsonl") if LOSS in r]
    last, final = rows[-1], tail_loss(rows)
    return {
        "settings": settings(yaml.safe_load((run / "recipe.yaml").read_text())),
        "parameters": parameters(run),
        "steps": last["step"],
        "tokens": last["tokens"],
        "seconds": last["seconds"],
        "tokens_per_s": last["tokens"] / last["seconds"],
        "final_lr": last["lr"],
        "final": final,
        "tlm_final": statistics.fmean(r["tlm/loss"] for r in rows[-final["windows"] :]) if "tlm/loss" in last else None,
        "at_minutes": {f"{q * minutes:g}": loss_at(rows, q * minutes * 60) for q in QUARTERS},
        "curve": [[r["seconds"], r[LOSS]] for r in rows],
    }


def reading(configs: dict[str, dict], minutes: float) -> list[str]:
    ranked = sorted(configs, key=lambda n: configs[n]["final"]["mean"])
    out = [
        f"Ranked by MLM loss over the last {TAIL:.0%} of the logged windows (lower is better; ± the windows' sd):",
        "",
    ]
    for i, n in enumerate(ranked, 1):
        c = configs[n]
        out.append(
            f"{i}. `{n}`: {c['final']['mean']:.3f} ± {c['final']['sd']:.3f} "
            f"({c['steps']} steps, {c['tokens_per_s']:,.0f} tokens/s)"
        )
    best = configs[ranked[0]]
    out += ["", f"Winner at {minutes:g} minutes: `{ranked[0]}`."]
    if len(ranked) > 1:
        second = configs[ranked[1]]
        margin = second["final"]["mean"] - best["final"]["mean"]
        noise = max(best["final"]["sd"], second["final"]["sd"])
        if min(best["final"]["windows"], second["final"]["windows"]) < 2:
            out[-1] += f" Its margin over `{ranked[1]}` is {margin:.3f} (too few windows for a spread)."
        elif margin > 2 * noise:
            out[-1] += (
                f" Its margin over `{ranked[1]}` is {margin:.3f}, more than twice the windows' sd at the end "
                f"({noise:.3f}); one seed per config, so seed-to-seed variation is not measured."
            )
        else:
            out[-1] += (
                f" Its margin over `{ranked[1]}` is {margin:.3f}, within twice the windows' sd at the end "
                f"({noise:.3f}): these two are not told apart by this sweep (one seed per config)."
            )
        times = [t for t in best["at_minutes"] if any(c["at_minutes"][t] is not None for c in configs.values())]
        leaders = {
            t: min((c["at_minutes"][t], n) for n, c in configs.items() if c["at_minutes"][t] is not None)[1]
            for t in times
        }
        if leaders:
            out += [
                "",
                "Lowest MLM loss at each common time: " + ", ".join(f"{t} min `{n}`" for t, n in leaders.items()) + ".",
            ]
    out += [
        "",
        "The measure is the MLM loss, not a cross-lingual measure: from scratch, at these budgets, retrieval and "
        "word alignment are at chance (small-base, 44 minutes of MLM + TLM on the same data, is: "
        "`../shared/models/small-base/README.md`), so they cannot rank the configs. The preset fixes what a "
        "short CPU run learns fastest with; which objective aligns languages is the other benches' question.",
    ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, required=True, help="bench/preset_sweep.sh's folder (runs/CONFIG)")
    ap.add_argument("--configs", nargs="+", required=True)
    ap.add_argument("--minutes", type=float, required=True, help="the training budget of each run")
    ap.add_argument("--command", required=True, help="the command that ran the bench, for the page")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results", help="where the page goes")
    args = ap.parse_args()

    configs = {n: summarize(args.work / "runs" / n, args.minutes) for n in args.configs}
    report = {
        "provenance": provenance(args.command),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "minutes": args.minutes,
        "measure": f"{LOSS}, mean over the last {TAIL:.0%} of the logged windows",
        "configs": configs,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    write_json(args.results / "preset.json", report)

    figures = args.results / "preset"
    curves = {n: ([s / 60 for s, _ in c["curve"]], [v for _, v in c["curve"]]) for n, c in configs.items()}
    full_png = plot_series(
        curves, figures / "mlm_loss.png", "training minutes", "MLM loss", "MLM loss per CPU-minute (xlm recipe)"
    )
    start = QUARTERS[0] * args.minutes
    late = {
        n: tuple(zip(*[(x, y) for x, y in zip(*c, strict=True) if x >= start], strict=True)) for n, c in curves.items()
    }
    tail_png = plot_series(
        {n: c for n, c in late.items() if c},
        figures / "mlm_loss_tail.png",
        "training minutes",
        "MLM loss",
        f"MLM loss from minute {start:g} on",
    )

    times = list(next(iter(configs.values()))["at_minutes"])
    rows = []
    for n, c in configs.items():
        s, p = c["settings"], c["parameters"]
        rows.append(
            [
                f"`{n}`",
                f"{s['layers']}x{s['hidden']}",
                s["heads"],
                s["ffn"],
                f"{s['lr']:g}",
                f"{s['mono_tokens']:,} / {s['parallel_tokens']:,}",
                f"{p['non_embedding'] / 1e6:.2f} / {p['total'] / 1e6:.2f}",
                c["steps"],
                f"{c['tokens'] / 1e6:.2f}",
                f"{c['tokens_per_s']:,.0f}",
                *("-" if c["at_minutes"][t] is None else f"{c['at_minutes'][t]:.3f}" for t in times),
                f"{c['final']['mean']:.3f} ± {c['final']['sd']:.3f}",
                "-" if c["tlm_final"] is None else f"{c['tlm_final']:.3f}",
            ]
        )
    any_config = next(iter(configs.values()))
    past = [c["final_lr"] / c["settings"]["lr"] for c in configs.values() if c["steps"] > c["settings"]["warmup_steps"]]
    decay = (
        f"at the last step of every run it was still at least {min(past):.1%} of its peak, so in effect constant "
        "after the warmup"
        if len(past) == len(configs)
        else f"{len(configs) - len(past)} of the runs ended within the warmup"
    )
    lines = [
        "# Preset sweep: the model size, learning rate and batch that learn fastest per CPU-minute",
        "",
        f"{report['provenance']} Page: `bench/preset_sweep_report.py`, {report['date']}.",
        "",
        f"Protocol. Each config trains the `xlm` recipe (MLM + TLM, XLM's Lample & Conneau 2019) from scratch for "
        f"{args.minutes:g} minutes of training time (`trainer.max_minutes`, checked every 5 steps; the final "
        f"checkpoint is not counted), seed 0, bf16 autocast, on the same prepared data. The lr warms up over "
        f"{any_config['settings']['warmup_steps']} steps and then decays linearly to zero at step "
        f"{any_config['settings']['max_steps']:,}: {decay}. The measure is the MLM loss "
        f"(`{LOSS}`, per logged window of 5 steps) against training seconds; each run is read at "
        f"the mean over its last {TAIL:.0%} of windows (± their sd), and its curve is interpolated at common times. "
        "Training sees each batch once (single epoch over a corpus far larger than these runs read), so the "
        "training loss on new batches estimates the held-out loss. One seed per config. Parameters: outside the "
        "embedding tables / in all (the MLM head's decoder shares the word embeddings).",
        "",
        "## Results",
        "",
        markdown_table(
            [
                "config",
                "layers x hidden",
                "heads",
                "FFN",
                "lr",
                "tokens per step (mono / parallel)",
                "parameters M (non-embedding / total)",
                "steps",
                "tokens M",
                "tokens/s",
                *(f"MLM loss at {t} min" for t in times),
                f"MLM loss, last {TAIL:.0%}",
                f"TLM loss, last {TAIL:.0%}",
            ],
            rows,
        ),
        "",
        f"![MLM loss]({figures.name}/{full_png.name})",
        "",
        f"![MLM loss, later part]({figures.name}/{tail_png.name})",
        "",
        "The curves: `bench/results/preset.json`.",
        "",
        "## Reading",
        "",
        *reading(configs, args.minutes),
        "",
    ]
    (args.results / "preset.md").write_text("\n".join(lines))
    print(f"wrote {args.results / 'preset.md'}")


if __name__ == "__main__":
    main()
