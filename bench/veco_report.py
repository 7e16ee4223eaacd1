"""Write bench/results/veco.md (+ veco.json) from what bench/veco.sh measured.

Every number comes from the run folder (metrics.jsonl, recipe.yaml) and the result file the script wrote,
bench/results/veco/plug-in/finetune.json; `--from-json` rewrites the page from bench/results/veco.json alone.
CA-MLM against MLM + TLM and translation from VECO weights are the harness's (bench/results/evidence.md, section
veco); this page's earlier tables of them are in git history (`git show edb6cd0:bench/results/veco.md`).
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

import torch
import yaml
from reporting import commit, cpu_name, provenance, records  # bench/ is on sys.path when this script runs

from polyalign.finetune.results import task_markdown

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work"
OUT = ROOT / "bench" / "results" / "veco"
RUN = "runs/veco-bench-veco"
EARLIER = "edb6cd0"  # the last commit whose veco.md has the xlm arm, Tatoeba-14, AER and translation tables


READING = """\
- Smoke scale: a few dozen continued steps on small-base, one seed. The pre-training row shows the recipe's
  staged continuation of a pretrained encoder running on real data (the harness's VECO arms train from scratch,
  every weight from step 1).
- The plug-in fine-tuning row shows that `polyalign finetune xnli --plug-in` runs end to end on a VECO model
  (one epoch on a subsample); its accuracy is not a measurement of the plug-in effect, which VECO states as
  plug-in against plug-out fine-tuning on translate-train-all (§5.2, Table 2: VECO_in vs VECO_out),
  measured neither here nor in the harness."""


def read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def training(run: Path) -> dict:
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


def render(report: dict, page_line: str) -> str:
    veco = report["training"]["veco"]
    trainer = veco["trainer"]
    masks = ", ".join(f"{k} {v:.0%}" for k, v in veco["mask_prob"].items())
    lines = [
        "# VECO continued from small-base, and plug-in fine-tuning (smoke scale)",
        "",
        f"{report['provenance']} Measured {report['date']}; every number below is read from the files those "
        f"commands wrote (`bench/results/veco.json` holds them all). {page_line}",
        "",
        "CA-MLM + TLM against MLM + TLM, and translation from VECO weights against encoder-only and random "
        "initialisation, are measured by the one harness: `bench/results/evidence.md`, section `veco` of "
        "`bench/evidence.sh`. This page's earlier tables of them (an `xlm` arm continued the same way, Tatoeba-14, "
        f"AER, translation de→en) are in git history: `git show {EARLIER}:bench/results/veco.md`.",
        "",
        "## Protocol",
        "",
        "- Data: `bench/work/prepared-all24` (every language of `../shared/data/train`, small-base's SentencePiece "
        "32k, Tatoeba sentences excluded).",
        f"- Start: `{veco['init_from']}` (MLM + TLM, no language embeddings, no cross-attention; VECO starts from "
        f"XLM-R), continued for {veco['steps']} steps (lr {trainer['lr']}, warmup {trainer['warmup_steps']}, "
        f"linear decay, AdamW, bf16, batches of {veco['max_tokens']} padded tokens per objective, seed "
        f"{trainer['seed']}) with new language embeddings, initialised at zero (`num_languages: auto`).",
        "- `veco`: recipe `veco`: CA-MLM on two adjacent monolingual segments on even steps, CA-MLM on "
        f"translation pairs + TLM on odd steps (masked: {masks}; Table 8); cross-attention added (newly "
        "initialised) to every layer, reading the partner's last layer (§2.2); only the cross-attention trained "
        f"for the first {veco['train_only_until']} steps, then every weight, the released ones warming up again "
        "(§4).",
        "",
        "## Pre-training",
        "",
        "| arm | objectives | steps | minutes | tokens | train FLOPs | losses over the last 20 steps |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in report["training"].items():
        losses = ", ".join(f"{k} {v:.3f}" for k, v in m["losses"].items() if v is not None and k != "loss")
        lines.append(
            f"| {name} | {' + '.join(m['objectives'])} | {m['steps']} | {m['minutes']:.1f} | {m['tokens']:,} | "
            f"{m['train_flops']:.3g} | {losses} |"
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
    lines += ["", "## Reading", "", READING, ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--command", default="flock /tmp/polyalign-cpu.lock bench/veco.sh", help="for the page")
    parser.add_argument("--from-json", action="store_true", help="rewrite the page from bench/results/veco.json")
    args = parser.parse_args()
    if args.from_json:
        report = json.loads((OUT.parent / "veco.json").read_text())
        page_line = f"Page rewritten by `bench/veco_report.py --from-json` at commit {commit()}."
    else:
        report = {
            "provenance": provenance(args.command),
            "date": str(date.today()),
            "machine": f"{cpu_name()}, {torch.get_num_threads()} threads",
            "torch": torch.__version__,
            "training": {"veco": training(WORK / RUN)},
            "plug_in": read(OUT / "plug-in" / "finetune.json"),
        }
        (OUT.parent / "veco.json").write_text(json.dumps(report, indent=2) + "\n")
        page_line = "Page written by `bench/veco_report.py`."
    (OUT.parent / "veco.md").write_text(render(report, page_line))


if __name__ == "__main__":
    main()
