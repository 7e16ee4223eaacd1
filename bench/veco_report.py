"""Write bench/results/veco.md (+ veco.json, figures) from what bench/veco.sh measured.

Every number comes from the run folders (metrics.jsonl, recipe.yaml) and the result files the script wrote:
bench/results/veco/{start,xlm,veco}/tatoeba.json, .../alignment-{pair}/alignment.json,
bench/results/veco/translation/*.json and bench/results/veco/plug-in/finetune.json.
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

import torch
import yaml
from reporting import cpu_name, provenance, records  # bench/ is on sys.path when this script runs

from polyalign.evaluate.plots import plot_series
from polyalign.finetune.results import task_markdown

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work"
OUT = ROOT / "bench" / "results" / "veco"
ARMS = {"start": "../shared/models/small-base", "xlm": "runs/veco-bench-xlm", "veco": "runs/veco-bench-veco"}
PAIRS = ("de-en", "en-fr")
TRANSLATION = ("veco", "xlm", "random")


READING = """\
- Smoke scale: a few dozen continued steps per arm on small-base, whose own retrieval is near chance (1-2%
  Tatoeba-14). What such a run can show is which continuation disturbs the start less, not VECO's gains; the
  tables above are one seed each.
- The plug-in fine-tuning row shows that `polyalign finetune xnli --plug-in` runs end to end on a VECO model
  (one epoch on a subsample); its accuracy is not a measurement of the plug-in effect."""


def read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def training(name: str) -> dict:
    run = WORK / ARMS[name]
    recs = records(run / "metrics.jsonl")
    recipe = yaml.safe_load((run / "recipe.yaml").read_text())
    last = recs[-1]
    tail = [r for r in recs if r["step"] > last["step"] - 20]  # the last two logging windows

    def mean(key: str) -> float | None:
        values = [r[key] for r in tail if key in r]
        return sum(values) / len(values) if values else None

    return {
        "objectives": [o["name"] for o in recipe["objectives"]],
        "init_from": recipe["init_from"],
        "steps": last["step"],
        "train_only": recipe["trainer"]["train_only"],
        "train_only_until": recipe["trainer"]["train_only_until"],
        "trainer": {k: recipe["trainer"][k] for k in ("lr", "warmup_steps", "seed")},
        "max_tokens": recipe["data"]["mono"]["max_tokens"],
        "mask_prob": {o["name"]: o["config"].get("mask_prob", 0.15) for o in recipe["objectives"]},
        "minutes": last["seconds"] / 60,
        "tokens": last["tokens"],
        "train_flops": last["flops"],
        "losses": {k: mean(k) for k in sorted({k for r in tail for k in r if k.endswith("loss")})},
    }


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--command", default="flock /tmp/polyalign-cpu.lock bench/veco.sh", help="for the page")
    args = parser.parse_args()
    report: dict = {
        "provenance": provenance(args.command),
        "date": str(date.today()),
        "machine": f"{cpu_name()}, {torch.get_num_threads()} threads",
        "torch": torch.__version__,
        "training": {name: training(name) for name in ARMS if name != "start"},
        "tatoeba": {name: read(OUT / name / "tatoeba.json") for name in ARMS},
        "alignment": {
            name: {p: read(OUT / name / f"alignment-{p}" / "alignment.json") for p in PAIRS} for name in ARMS
        },
        "translation": {name: read(OUT / "translation" / f"{name}.json") for name in TRANSLATION},
        "plug_in": read(OUT / "plug-in" / "finetune.json"),
    }
    (OUT.parent / "veco.json").write_text(json.dumps(report, indent=2) + "\n")

    series = {}
    for name, t in report["tatoeba"].items():
        if t:
            sweep = t["sweep"]
            series[name] = ([r["layer"] for r in sweep], [r["average"]["both"] for r in sweep])
    plot_series(
        series,
        OUT / "tatoeba14_layers.png",
        "layer (0 = embeddings)",
        "acc@1 (%), both directions",
        "Tatoeba-14 by layer",
    )
    curves = {
        n: ([c["step"] for c in t["train_curve"]], [c["loss"] for c in t["train_curve"]])
        for n, t in report["translation"].items()
        if t
    }
    if curves:
        plot_series(
            curves,
            OUT / "translation_loss.png",
            "fine-tuning step",
            "training loss (nats/token)",
            "de→en fine-tuning from each initialisation",
        )

    tr = report["training"]
    K = tr["veco"]["steps"]
    veco, trainer = tr["veco"], tr["veco"]["trainer"]
    masks = ", ".join(f"{k} {v:.0%}" for k, v in veco["mask_prob"].items())
    lines = [
        "# VECO vs XLM at equal steps, VECO-initialised translation, plug-in fine-tuning",
        "",
        f"{report['provenance']} Measured {report['date']}; every number below is read from the files those "
        "commands wrote (`bench/results/veco.json` holds them all, per language and per layer; page written by "
        "`bench/veco_report.py`).",
        "",
        "## Protocol",
        "",
        "- Data: `bench/work/prepared-all24` (every language of `../shared/data/train`, small-base's SentencePiece "
        "32k, Tatoeba sentences excluded), the same for both arms.",
        f"- Start (`start` below): `{veco['init_from']}` (MLM + TLM, no language embeddings, no cross-attention; "
        f"VECO starts from XLM-R). Both arms continue from it for {K} steps with the same schedule (lr "
        f"{trainer['lr']}, warmup {trainer['warmup_steps']}, linear decay, AdamW, bf16, batches of "
        f"{veco['max_tokens']} padded tokens per objective, seed {trainer['seed']}) and get new language "
        "embeddings, initialised at zero (`num_languages: auto` in both recipes):",
        "  - `xlm`: recipe `xlm`, MLM + TLM on every step.",
        "  - `veco`: recipe `veco`: CA-MLM on two adjacent monolingual segments on even steps, CA-MLM on "
        f"translation pairs + TLM on odd steps (masked: {masks}; Table 8); cross-attention added (newly "
        "initialised) to every layer, reading the partner's last layer (§2.2); only the cross-attention trained "
        f"for the first {veco['train_only_until']} steps, then every weight, the released ones warming up again "
        "(§4).",
        "- Evaluation of `veco` uses its plugged-out encoder (`polyalign plug-out`: no cross-attention), so all "
        "three are plain encoders. Tatoeba protocol: "
        + next((t["protocol"] for t in report["tatoeba"].values() if t), "n/a")
        + "; Tatoeba-14 = ara bul deu ell fra hin rus spa swh tha tur urd vie cmn.",
        "- Word alignment: `polyalign evaluate alignment --method ot --layers all` on "
        "`../shared/data/eval/word_alignment/{de-en,en-fr}`; AER in %, lower is better.",
        "",
        "## Pre-training",
        "",
        "| arm | objectives | steps | minutes | tokens | train FLOPs | losses over the last 20 steps |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in tr.items():
        losses = ", ".join(f"{k} {v:.3f}" for k, v in m["losses"].items() if v is not None and k != "loss")
        lines.append(
            f"| {name} | {' + '.join(m['objectives'])} | {m['steps']} | {m['minutes']:.1f} | {m['tokens']:,} | "
            f"{m['train_flops']:.3g} | {losses} |"
        )
    lines += [
        "",
        "## Tatoeba-14 acc@1 (%)",
        "",
        "| model | layer | xx→en | en→xx | mean | best layer (mean) |",
        "|---|---|---|---|---|---|",
    ]
    for name, t in report["tatoeba"].items():
        if not t:
            lines.append(f"| {name} | not measured | | | | |")
            continue
        r = t["reported"]
        best = max(t["sweep"], key=lambda row: row["average"]["both"])
        lines.append(
            f"| {name} | {r['layer']} | {r['average']['xx_to_en']:.1f} | {r['average']['en_to_xx']:.1f} | "
            f"{r['average']['both']:.1f} | {best['layer']} ({best['average']['both']:.1f}) |"
        )
    lines += ["", "## Word alignment AER (%), OT", ""]
    if not any(a for arm in report["alignment"].values() for a in arm.values()):
        lines.append("Not measured: `polyalign evaluate alignment` was not available when the bench ran.")
    else:
        lines += [
            "| model | " + " | ".join(f"{p} (layer) | {p} best layer" for p in PAIRS) + " |",
            "|---|" + "---|---|" * len(PAIRS),
        ]
        for name, arm in report["alignment"].items():
            cells = []
            for p in PAIRS:
                a = arm[p]
                if not a:
                    cells += ["n/a", "n/a"]
                    continue
                best = min(a.get("sweep") or [a], key=lambda row: row["aer"])
                cells += [f"{a['aer']:.1f} ({a['layer']})", f"{best['aer']:.1f} ({best['layer']})"]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Translation de→en (VECO §3.2)",
        "",
    ]
    t0 = next((t for t in report["translation"].values() if t), None)
    if t0:
        lines += [
            f"Sequence-to-sequence Transformer (`polyalign/model/seq2seq.py`, {t0['layers']} + {t0['layers']} "
            f"layers, hidden {t0['hidden_size']}, "
            f"{t0['parameters'] / 1e6:.1f}M parameters, shared embeddings, every decoder layer attends to the "
            "final encoder output through VECO's cross-attention weights), "
            f"fine-tuned {t0['steps']} steps on {t0['train_pairs']:,} en-de pairs of "
            f"`../shared/data/train/parallel` (batches of {t0['batch_tokens']} padded tokens, lr {t0['lr']}, "
            "warmup 10%, linear decay, bf16), greedy decoding. Test sets: `heldout` = the first "
            f"{t0['heldout']['sentences']} pairs with at most 62 tokens per side among the last 1,000 lines of the "
            "file (not used in fine-tuning; pre-training sampled parallel lines from the whole file, so a few of "
            f"these pairs may have been seen by TLM/CA-MLM), `tatoeba` = the first {t0['tatoeba']['sentences']} "
            "deu-eng Tatoeba pairs (excluded from pre-training). " + t0["sacrebleu_signature"],
            "",
            "| initialisation | heldout BLEU | heldout chrF | tatoeba BLEU | tatoeba chrF | heldout loss | final "
            "train loss | minutes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        names = {"veco": "VECO (every weight)", "xlm": "xlm arm (enc-dec attention new)", "random": "random"}
        for name, t in report["translation"].items():
            if not t:
                lines.append(f"| {names[name]} | not measured | | | | | | |")
                continue
            lines.append(
                f"| {names[name]} | {t['heldout']['bleu']:.2f} | {t['heldout']['chrf']:.1f} | "
                f"{t['tatoeba']['bleu']:.2f} | {t['tatoeba']['chrf']:.1f} | {t['heldout_loss']:.3f} | "
                f"{t['train_curve'][-1]['loss']:.3f} | {t['seconds'] / 60:.1f} |"
            )
    lines += ["", "## Plug-in fine-tuning, XNLI translate-train-all (VECO §3.1), smoke scale", ""]
    if report["plug_in"]:
        result = report["plug_in"]["results"][0]
        lines += [
            "`polyalign finetune xnli --plug-in --setting translate-train-all` on the `veco` run (cross-attention "
            "plugged in: each input is read with its translation, the classifier takes [H^L : S^L]).",
            "",
            task_markdown(result, "xnli (translate-train-all, plug-in)"),
        ]
    else:
        lines.append("Not run.")
    lines += ["", "Figures: `veco/tatoeba14_layers.png`, `veco/translation_loss.png`.", ""]
    lines += ["## Reading", "", READING, ""]
    (OUT.parent / "veco.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
