"""Write bench/results/ppa.md, ppa.json and ppa/*.png from the runs and evaluations of bench/ppa.sh.

Every number comes from the runs' recipe.yaml and metrics.jsonl and from the evaluations' tatoeba.json; the
reading is generated from those numbers: what each arm measured, and how it differs from the `base` arm in
the one setting it changes. It states no cause that an arm did not isolate.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import yaml
from reporting import machine, markdown_table, provenance, read_json, records, write_json  # bench/ is on sys.path

from polyalign.evaluate.plots import plot_series

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
WINDOW = 10  # steps averaged at the start and at the end of a run (the logged values are per step)
SETTINGS = (
    "init_from",
    "objective",
    "steps",
    "lr",
    "batch_pairs",
    "min_length",
    "queue_size",
    "momentum",
    "temperature",
    "pooling",
    "tlm",
    "projection_size",
    "batch_negatives",
)
WHAT = {
    "base": "the calibration settings",
    "lr": "a higher peak lr",
    "tau": "temperature 0.1",
    "aligned": "a sentence-aligned start model",
    "notlm": "-TLM, MoCo alone",
    "short": "no minimum pair length",
    "inbatch": "in-batch translation ranking in place of MoCo + TLM",
    "scratch": "in-batch ranking from a randomly initialised model",
    "nolag": "-TLM with momentum 0, keys from the current weights",
    "noproj": "-TLM without the projection head (Eq. 2)",
    "batchneg": "the batch's other keys as negatives too",
    "m999": "the paper's momentum 0.999",
    "m90": "`batchneg` at momentum 0.9: the key encoder's time constant 1/(1-m) is 10 steps",
    "m90notlm": "`m90` without TLM",
    "m90queue": "`m90notlm` with the queue as the only negatives, as in PPA",
}
# The arm each one changes one setting of (bench/ppa.sh): the later arms start from `lr`, the arm that learned most.
REFERENCE = {
    "lr": "base",
    "tau": "base",
    "aligned": "base",
    "notlm": "lr",
    "short": "lr",
    "inbatch": "lr",
    "scratch": "inbatch",
    "nolag": "notlm",
    "noproj": "notlm",
    "batchneg": "short",
    "m999": "short",
    "m90": "batchneg",
    "m90notlm": "m90",
    "m90queue": "m90notlm",
}


def settings(recipe: dict) -> dict:
    objective = recipe["objectives"][0]
    config = objective["config"]
    moco = objective["name"] == "moco"
    return {
        "init_from": os.path.relpath(recipe["init_from"], ROOT),
        "objective": objective["name"],
        "steps": recipe["trainer"]["max_steps"],
        "lr": recipe["trainer"]["lr"],
        "batch_pairs": recipe["data"]["parallel"]["max_examples"],
        "min_length": recipe["data"]["parallel"].get("min_length", 1),
        "queue_size": config["queue_size"] if moco else "-",
        "momentum": config["momentum"] if moco else "-",
        "temperature": config["temperature"],
        "pooling": config["pooling"],
        "tlm": config.get("tlm", True) if moco else False,
        "projection_size": config.get("projection_size", 300) if moco else "-",
        "batch_negatives": config.get("batch_negatives", False) if moco else True,
    }


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def training(run: Path) -> dict:
    """The contrastive loss and accuracy once the negatives are all real, and at the end, against chance.

    MoCo: the queue starts as random unit vectors, which any encoder tells apart from a real key, so the loss of
    the first steps is low for that reason alone; "start" is the WINDOW steps after the queue has filled.
    In-batch ranking (`inbatch`): the negatives are the batch's other pairs from step 1; the uniform loss is
    ln(B) and chance 1/B."""
    s = settings(yaml.safe_load((run / "recipe.yaml").read_text()))
    moco = s["objective"] == "moco"
    prefix = "moco/moco_" if moco else "contrast/"
    loss_key, accuracy_key = prefix + "loss", prefix + "accuracy"
    recs = [r for r in records(run / "metrics.jsonl") if loss_key in r]
    negatives = s["queue_size"] if moco else s["batch_pairs"] - 1
    filled = math.ceil(negatives / s["batch_pairs"]) if moco else 0  # steps until every queue row is a real key
    after = [r for r in recs if r["step"] > filled][:WINDOW]
    last = recs[-WINDOW:]
    out = {
        "loss_name": "MoCo loss" if moco else "in-batch ranking loss",
        "negatives": negatives,
        "loss_step1": recs[0][loss_key],
        "filled_at_step": filled,
        "loss_start": mean([r[loss_key] for r in after]),
        "loss_end": mean([r[loss_key] for r in last]),
        "uniform_loss": math.log(negatives + 1),  # ln(K + 1): the loss of a softmax that cannot tell keys apart
        "accuracy_start": mean([r[accuracy_key] for r in after]),
        "accuracy_end": mean([r[accuracy_key] for r in last]),
        "chance_accuracy": 1 / (negatives + 1),
        "minutes": recs[-1]["seconds"] / 60,
        "loss_curve": [[r["step"], r[loss_key]] for r in recs],
    }
    if "moco/moco_batch_accuracy" in recs[0]:  # runs since the metric exists
        out |= {
            "batch_accuracy_end": mean([r["moco/moco_batch_accuracy"] for r in last]),
            "batch_chance": 1 / s["batch_pairs"],
        }
    if "moco/tlm_loss" in recs[0]:
        out |= {
            "tlm_loss_start": mean([r["moco/tlm_loss"] for r in after]),
            "tlm_loss_end": mean([r["moco/tlm_loss"] for r in last]),
        }
    return out


def retrieval(folder: Path) -> dict:
    """acc@1 (%) at the reported layer, both directions averaged: Tatoeba-14, and the dev pairs' languages."""
    out = {}
    for name in ("tatoeba", "dev"):
        t = read_json(folder / name / "tatoeba.json")
        r = t["reported"]
        both = r["tatoeba14"] if name == "tatoeba" else r["average"]
        out[name] = {
            "layer": r["layer"],
            "acc": (both["xx_to_en"] + both["en_to_xx"]) / 2,
            "per_language": {k: (v["xx_to_en"] + v["en_to_xx"]) / 2 for k, v in r["per_language"].items()},
            "protocol": t["protocol"],
            "sizes": t["sizes"],
        }
    return out


def reading(arms: dict) -> list[str]:
    out = []
    for name, a in arms.items():
        t, s, e = a["training"], a["start"], a["end"]
        gap = t["uniform_loss"] - t["loss_end"]
        moved = {k: f"{s[k]['acc']:.1f} -> {e[k]['acc']:.1f} ({e[k]['acc'] - s[k]['acc']:+.1f})" for k in s}
        when = (
            f"mean of the {WINDOW} steps after the queue filled at step {t['filled_at_step']} / of the last "
            f"{WINDOW}; {t['loss_step1']:.2f} at step 1, against a queue of random vectors"
            if t["filled_at_step"]
            else f"mean of the first / last {WINDOW} steps"
        )
        out.append(
            f"- `{name}` ({WHAT.get(name, name)}): {t['loss_name']} {t['loss_start']:.2f} -> {t['loss_end']:.2f} "
            f"({when}), {abs(gap):.2f} nats {'below' if gap > 0 else 'above'} ln(K+1) = {t['uniform_loss']:.2f} "
            f"(K = {t['negatives']} negatives); accuracy {100 * t['accuracy_start']:.1f}% -> "
            f"{100 * t['accuracy_end']:.1f}% (chance {100 * t['chance_accuracy']:.3f}%)"
            + (
                f", among the batch's own {round(1 / t['batch_chance'])} fresh keys "
                f"{100 * t['batch_accuracy_end']:.1f}% at the end"
                if "batch_accuracy_end" in t
                else ""
            )
            + ". Tatoeba-14 "
            f"{moved['tatoeba']}, dev retrieval {moved['dev']}."
        )
    gains = lambda x, key: x["end"][key]["acc"] - x["start"][key]["acc"]  # noqa: E731
    for name, a in arms.items():
        ref_name = REFERENCE.get(name)
        ref = arms.get(ref_name)
        if ref is None:
            continue
        old, new = ref["settings"], a["settings"]
        changed = {k: (old[k], new[k]) for k in SETTINGS if old[k] != new[k]}
        what = ", ".join(f"{k} {b} -> {v}" for k, (b, v) in changed.items()) or "nothing"
        out.append(
            f"- `{name}` differs from `{ref_name}` in {what}: final {a['training']['loss_name']} "
            f"{a['training']['loss_end']:.2f} vs {ref['training']['loss_name']} {ref['training']['loss_end']:.2f}, "
            f"Tatoeba-14 gain {gains(a, 'tatoeba'):+.1f} vs {gains(ref, 'tatoeba'):+.1f}, dev gain "
            f"{gains(a, 'dev'):+.1f} vs {gains(ref, 'dev'):+.1f}"
            + (
                f"; trained level Tatoeba-14 {a['end']['tatoeba']['acc']:.1f} vs {ref['end']['tatoeba']['acc']:.1f}."
                if "init_from" in changed
                else "."
            )
        )
    out += limits(arms)
    out.append(
        "- One seed per arm; no run-to-run spread was measured. Settings not varied here (queue size, batch, "
        "steps beyond this length) are not ruled in or out by these rows."
    )
    return out


def limits(arms: dict) -> list[str]:
    """What the one-change arms say about the limit, each sentence only when both of its arms ran."""
    gain = lambda name, key: arms[name]["end"][key]["acc"] - arms[name]["start"][key]["acc"]  # noqa: E731
    level = lambda name, key: arms[name]["end"][key]["acc"]  # noqa: E731
    out = []
    if {"lr", "inbatch"} <= set(arms):
        out.append(
            f"- Same pairs, batch, lr and steps: in-batch translation ranking gains {gain('inbatch', 'tatoeba'):+.1f} "
            f"Tatoeba-14 and {gain('inbatch', 'dev'):+.1f} dev points where MoCo + TLM gains "
            f"{gain('lr', 'tatoeba'):+.1f} and {gain('lr', 'dev'):+.1f}: at this budget the objective limits the gain, "
            "not the data, the batch or the step count alone."
        )
    if {"inbatch", "scratch"} <= set(arms):
        out.append(
            "- From a randomly initialised model the same ranking reaches Tatoeba-14 "
            f"{level('scratch', 'tatoeba'):.1f} / dev {level('scratch', 'dev'):.1f} (from small-base: "
            f"{level('inbatch', 'tatoeba'):.1f} / {level('inbatch', 'dev'):.1f}): small-base's pre-training "
            "gives this objective no head start here."
        )
    if {"notlm", "nolag"} <= set(arms):
        t = arms["nolag"]["training"]
        out.append(
            f"- Momentum 0 (keys from the current weights): the MoCo loss ends at {t['loss_end']:.2f}, "
            f"{t['uniform_loss'] - t['loss_end']:.2f} nats below ln(K+1), and retrieval falls to Tatoeba-14 "
            f"{level('nolag', 'tatoeba'):.1f} / dev {level('nolag', 'dev'):.1f}, below the start: without the slowly "
            "moving key encoder MoCo unlearns what the start model had, so the momentum update (Eq. 1) is needed."
        )
    if {"notlm", "noproj"} <= set(arms):
        out.append(
            f"- Without the projection head (InfoNCE on the pooled states that retrieval reads): Tatoeba-14 gain "
            f"{gain('noproj', 'tatoeba'):+.1f} vs {gain('notlm', 'tatoeba'):+.1f} with it, dev gain "
            f"{gain('noproj', 'dev'):+.1f} vs {gain('notlm', 'dev'):+.1f}."
        )
    if {"lr", "notlm"} <= set(arms):
        out.append(
            f"- -TLM (PPA Table 5's ablation): Tatoeba-14 gain {gain('notlm', 'tatoeba'):+.1f} vs "
            f"{gain('lr', 'tatoeba'):+.1f}, dev gain {gain('notlm', 'dev'):+.1f} vs {gain('lr', 'dev'):+.1f} with TLM."
        )
    if {"lr", "short"} <= set(arms):
        out.append(
            f"- Keeping pairs under 10 tokens (PPA §3.1 drops them; Tatoeba's sentences are short): Tatoeba-14 gain "
            f"{gain('short', 'tatoeba'):+.1f} vs {gain('lr', 'tatoeba'):+.1f}, dev gain {gain('short', 'dev'):+.1f} "
            f"vs {gain('lr', 'dev'):+.1f}."
        )
    fresh = {n for n in ("short", "batchneg", "m999") if "batch_accuracy_end" in arms.get(n, {}).get("training", {})}
    if "short" in fresh:
        t = arms["short"]["training"]
        queue, batch = 100 * t["accuracy_end"], 100 * t["batch_accuracy_end"]
        shortcut = batch < queue  # fewer candidates, yet ranked first less often: the queue is the easier task
        fewer = round((t["negatives"] + 1) * t["batch_chance"])
        out.append(
            f"- Fresh against stale keys (`short`): at the end the query ranks its key first among {t['negatives']} "
            f"queued keys {queue:.1f}% of the time and among the {round(1 / t['batch_chance'])} equally fresh keys "
            f"of its own batch {batch:.1f}%. Every queued key comes from an older key encoder than the positive, so "
            "the queue task could be won by telling a fresh key from stale ones; "
            + (
                f"here it is: with {fewer} times fewer candidates the batch accuracy is lower."
                if shortcut
                else f"here it is not: the batch accuracy, with {fewer} times fewer candidates, is higher, as it is "
                "when the keys are told apart by content (in the toy test of tests/test_moco.py, with momentum 0.9, it "
                "is the other way round: 84% of 65 queued keys against 41% of 32 batch keys)."
            )
        )
    if {"batchneg", "inbatch", "notlm", "noproj"} <= set(arms):
        out.append(
            "- Between `batchneg` and `inbatch` (batch accuracy "
            f"{100 * arms['batchneg']['training']['batch_accuracy_end']:.1f}% vs "
            f"{100 * arms['inbatch']['training']['accuracy_end']:.1f}% among the same 128 pairs) the arms above rule "
            "out one difference each within their one seed: TLM (`notlm`), the projection head (`noproj`), stale "
            "queue negatives (`batchneg`). Left, and not isolated by any arm: in MoCo the keys come from the "
            "momentum encoder and carry no gradient (only the query side learns), where in-batch ranking trains "
            "both sides of every pair."
        )
    for name in sorted(fresh - {"short"}):
        if "short" in arms:
            out.append(
                f"- `{name}` ({WHAT[name]}): batch accuracy {100 * arms[name]['training']['batch_accuracy_end']:.1f}%"
                + (
                    f" vs {100 * arms['short']['training']['batch_accuracy_end']:.1f}% in `short`"
                    if "short" in fresh
                    else ""
                )
                + f"; Tatoeba-14 gain {gain(name, 'tatoeba'):+.1f} vs {gain('short', 'tatoeba'):+.1f}, dev gain "
                f"{gain(name, 'dev'):+.1f} vs {gain('short', 'dev'):+.1f}."
            )
    if {"m90", "batchneg"} <= set(arms):
        lag = lambda name: 1 / (1 - arms[name]["settings"]["momentum"])  # noqa: E731  (steps, Eq. 1's EMA)
        steps = arms["m90"]["settings"]["steps"]
        out.append(
            f"- The key encoder's lag: at momentum {arms['m90']['settings']['momentum']} (time constant 1/(1-m) = "
            f"{lag('m90'):.0f} steps, so {steps} steps are {steps / lag('m90'):.0f} time constants, as PPA's ~20,000 "
            f"steps are 20 at its 0.999) MoCo + TLM gains {gain('m90', 'tatoeba'):+.1f} Tatoeba-14 and "
            f"{gain('m90', 'dev'):+.1f} dev points, against {gain('batchneg', 'tatoeba'):+.1f} and "
            f"{gain('batchneg', 'dev'):+.1f} at {arms['batchneg']['settings']['momentum']} (time constant "
            f"{lag('batchneg'):.0f} steps)."
        )
    if {"m90notlm", "m90queue"} <= set(arms):
        queued, fresh = arms["m90queue"]["training"], arms["m90notlm"]["training"]
        out.append(
            "- At momentum 0.9 the queue alone (PPA's negatives) is won by freshness: without the batch's own keys "
            f"as negatives the query ranks its key first among the queue {100 * queued['accuracy_end']:.1f}% of the "
            f"time but among its batch's {round(1 / queued['batch_chance'])} equally fresh keys only "
            f"{100 * queued['batch_accuracy_end']:.1f}% (with them: {100 * fresh['batch_accuracy_end']:.1f}%), and "
            f"retrieval gains {gain('m90queue', 'tatoeba'):+.1f} Tatoeba-14 / {gain('m90queue', 'dev'):+.1f} dev "
            f"against {gain('m90notlm', 'tatoeba'):+.1f} / {gain('m90notlm', 'dev'):+.1f}: a key encoder that moves "
            "fast enough to learn in 300 steps makes every queued key visibly older than the positive, and the batch "
            "negatives are what keeps MoCo learning content."
        )
    return out


def group_by_provenance(arms: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, arm in arms.items():
        out.setdefault(arm["provenance"], []).append(name)
    return out


def carried_over(previous: dict, rerun: list[str]) -> dict:
    """Arms of the previous page that this run did not train again, each with the command that produced it, so
    that a bench run of a few new arms adds rows instead of replacing the page."""
    return {
        name: {**arm, "provenance": arm.get("provenance", previous["provenance"])}
        for name, arm in previous.get("arms", {}).items()
        if name not in rerun
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, required=True, help="bench/ppa.sh's folder (runs/ and evals/)")
    ap.add_argument("--arms", nargs="+", required=True)
    ap.add_argument("--command", required=True, help="the command that ran the bench, for the page")
    args = ap.parse_args()

    previous = read_json(RESULTS / "ppa.json") if (RESULTS / "ppa.json").exists() else {}
    arms = carried_over(previous, args.arms)
    starts = {a["start_model"]: a["start"] for a in arms.values()}
    for name in args.arms:
        run = args.work / "runs" / name
        s = settings(yaml.safe_load((run / "recipe.yaml").read_text()))
        start = {"small-base": "start-small-base", "random-init": "start-random"}.get(
            Path(s["init_from"]).name, "start-aligned"
        )
        starts[start] = retrieval(args.work / "evals" / start)  # measured again: the same model, the same numbers
        arms[name] = {
            "provenance": provenance(args.command),
            "settings": s,
            "start_model": start,
            "training": training(run),
            "start": starts[start],
            "end": retrieval(args.work / "evals" / name),
        }
    report = {
        "provenance": provenance(args.command),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "arms": arms,
    }
    write_json(RESULTS / "ppa.json", report)

    figures = RESULTS / "ppa"
    curves = {n: tuple(zip(*a["training"]["loss_curve"], strict=True)) for n, a in arms.items()}
    for n, a in arms.items():
        steps = curves[n][0]
        curves[f"ln(K+1), {n}"] = ([steps[0], steps[-1]], [a["training"]["uniform_loss"]] * 2)
        break  # the same K in every arm unless QUEUE was changed between them
    loss_png = plot_series(
        curves, figures / "moco_loss.png", "step", "contrastive loss (InfoNCE)", "MoCo / in-batch ranking loss per step"
    )

    any_arm = next(iter(arms.values()))
    rows = [
        [start, "-", "-", "-", f"{r['tatoeba']['acc']:.1f}", f"{r['dev']['acc']:.1f}"] for start, r in starts.items()
    ]
    for n, a in arms.items():
        t = a["training"]
        rows.append(
            [
                n,
                f"{t['loss_start']:.2f} -> {t['loss_end']:.2f} (ln(K+1) {t['uniform_loss']:.2f})",
                f"{100 * t['accuracy_start']:.1f} -> {100 * t['accuracy_end']:.1f}",
                f"{t['minutes']:.1f}",
                f"{a['end']['tatoeba']['acc']:.1f} ({a['end']['tatoeba']['acc'] - a['start']['tatoeba']['acc']:+.1f})",
                f"{a['end']['dev']['acc']:.1f} ({a['end']['dev']['acc'] - a['start']['dev']['acc']:+.1f})",
            ]
        )
    settings_rows = [[n, *(str(a["settings"][k]) for k in SETTINGS)] for n, a in arms.items()]
    dev_sizes = sorted(set(any_arm["end"]["dev"]["sizes"].values()))
    lines = [
        "# PPA from small-base: MoCo + TLM on the representation it trains",
        "",
        f"{report['provenance']} Page: `bench/ppa_report.py`, {report['date']}.",
        "",
        *(
            f"Arms {', '.join(f'`{n}`' for n in names)}: {line}"
            for line, names in group_by_provenance(arms).items()
            if line != report["provenance"]
        ),
        "",
        "Protocol. Each arm continues a start model with the `ppa` recipe (MoCo with PPA-style TLM on the same "
        "pairs, PPA §2.1-2.2; InfoNCE in fp32; the pair filter of §3.1; the `inbatch` arm swaps in in-batch "
        "translation ranking) for the steps below, linear schedule "
        "with 10% warmup, seed 0. Every model is measured on the representation MoCo trains "
        f"({any_arm['settings']['pooling']} pooling over layer {any_arm['end']['tatoeba']['layer']}, the last): "
        f"Tatoeba-14 ({any_arm['end']['tatoeba']['protocol']}), and retrieval among the dev pairs that "
        f"`prepare --dev-pairs` held out of the training bitext ({len(any_arm['end']['dev']['sizes'])} languages, "
        f"{'-'.join(map(str, dev_sizes[:: max(1, len(dev_sizes) - 1)]))} pairs each, same protocol). acc@1 in %, both "
        f"directions averaged; contrastive loss and accuracy (the positive ranked first among the K negatives): means "
        f"over the {WINDOW} steps after the MoCo queue first holds only real keys (K / pairs per batch steps; the "
        f"first {WINDOW} for in-batch ranking, whose K is the batch's other pairs) and over the last {WINDOW} steps.",
        "",
        "## Arms",
        "",
        markdown_table(["arm", *SETTINGS], settings_rows),
        "",
        "## Results",
        "",
        markdown_table(
            ["model", "contrastive loss", "accuracy %", "train min", "Tatoeba-14 (Δ vs start)", "dev (Δ vs start)"],
            rows,
        ),
        "",
        f"![contrastive loss]({figures.name}/{loss_png.name})",
        "",
        "Per-language numbers and the loss curves: `bench/results/ppa.json`.",
        "",
        "## Reading",
        "",
        *reading(arms),
        "",
    ]
    (RESULTS / "ppa.md").write_text("\n".join(lines))
    print(f"wrote {RESULTS / 'ppa.md'}")


if __name__ == "__main__":
    main()
