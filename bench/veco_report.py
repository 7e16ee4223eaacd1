"""Write bench/results/veco.md (+ veco.json, figures) from what bench/veco.sh measured.

Every number comes from the run folders (metrics.jsonl, recipe.yaml) and the result files the script wrote:
bench/results/veco/{start,xlm,veco}/tatoeba.json, .../alignment-{pair}/alignment.json and
bench/results/veco/translation/*.json.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import torch
import yaml
from reporting import cpu_name, records  # bench/ is on sys.path when this script runs

from polyalign.evaluate.plots import plot_series

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work"
OUT = ROOT / "bench" / "results" / "veco"
ARMS = {"start": "runs/mlm", "xlm": "runs/veco-bench-xlm", "veco": "runs/veco-bench-veco"}
PAIRS = ("de-en", "en-fr")
TRANSLATION = ("veco", "xlm", "random")


READING = """\
- Smoke scale: 30 continued steps per arm (0.2-0.3M tokens) on a 6-layer model whose own retrieval is 1-2%.
  What the run can show is which continuation disturbs the starting model less, not VECO's gains.
- At equal steps the `xlm` arm loses retrieval and alignment quality at the default layer (Tatoeba-14 mean 1.7
  -> 0.7, AER de-en 78.1 -> 81.1, en-fr 63.2 -> 66.2), the VECO arm much less (1.4; 77.7; 63.5). A plausible
  reason, not tested: its first 6 steps train only the new cross-attention, and it saw fewer tokens
  (0.23M vs 0.34M). One seed each.
- Translation after 40 fine-tuning steps: no model translates yet (BLEU ~0, chrF 4-5). Both pre-trained
  initialisations start the decoder from a lower held-out loss than random weights (6.50-6.52 vs 6.93); VECO's
  full initialisation (cross-attention as encoder-decoder attention) and the xlm arm's are indistinguishable at
  this length. VECO §3.2's comparison needs thousands of steps."""


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
        "minutes": last["seconds"] / 60,
        "tokens": last["tokens"],
        "train_flops": last["flops"],
        "losses": {k: mean(k) for k in sorted({k for r in tail for k in r if k.endswith("loss")})},
    }


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def main() -> None:
    report: dict = {
        "date": str(date.today()),
        "machine": f"{cpu_name()}, {torch.get_num_threads()} threads",
        "torch": torch.__version__,
        "training": {name: training(name) for name in ARMS if name != "start"},
        "tatoeba": {name: read(OUT / name / "tatoeba.json") for name in ARMS},
        "alignment": {
            name: {p: read(OUT / name / f"alignment-{p}" / "alignment.json") for p in PAIRS} for name in ARMS
        },
        "translation": {name: read(OUT / "translation" / f"{name}.json") for name in TRANSLATION},
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
    lines = [
        "# VECO vs XLM at equal steps, and VECO-initialised translation",
        "",
        f"Measured {report['date']} on {report['machine']}, torch {report['torch']}. Produced by "
        "`K=30 CHUNK=30 MT_STEPS=40 flock /tmp/polyalign-cpu.lock bench/veco.sh` (run by `bench/all.sh`; it ends with "
        "`bench/veco_report.py`); every number below is read from the files those commands wrote "
        "(`bench/results/veco.json` holds them all, per language and per layer).",
        "",
        "## Protocol",
        "",
        "- Data: `bench/work/prepared-xnli15` (English + the 14 XNLI languages from `../shared/data/train`, "
        "SentencePiece 32k, Tatoeba sentences excluded), the same for both arms.",
        "- Start (`start` below): the foundation `mlm` run (MLM only, no language embeddings, 620 steps; VECO "
        f"starts from XLM-R, an MLM model). Both arms continue from it for {K} steps with the same schedule (lr "
        f"5e-4, warmup {K // 10}, linear decay, AdamW, bf16, batches of 8192 padded tokens per objective, seed 0) "
        "and get new language embeddings (`num_languages: auto` in both recipes):",
        "  - `xlm`: recipe `xlm`, MLM + TLM on every step.",
        "  - `veco`: recipe `veco`: CA-MLM on two adjacent monolingual segments on even steps, CA-MLM on "
        "translation pairs + TLM on odd steps; cross-attention added (newly initialised) to every layer; "
        f"only the cross-attention trained for the first {tr['veco']['train_only_until']} steps (VECO §4).",
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
            f"{t0['parameters'] / 1e6:.1f}M parameters, shared embeddings, decoder layer l attends to encoder "
            f"layer l), fine-tuned {t0['steps']} steps on {t0['train_pairs']:,} en-de pairs of "
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
    lines += ["", "Figures: `veco/tatoeba14_layers.png`, `veco/translation_loss.png`.", ""]
    lines += ["## Reading", "", READING, ""]
    (OUT.parent / "veco.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
