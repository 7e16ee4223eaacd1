"""The quickstart recipe trained twice from the same seed on the bundled sample, eagerly and with compiling forced on
(Inductor; each encoder layer and the MLM loss compiled on their own), on this machine's CPU: the compiled run's
final logged loss (the mean of its last `log_every` steps) must lie within 1% of the eager run's. Dropout draws
differ between the two (Inductor's random numbers are its own), so the curves agree in trend, not bit for bit.

Usage: flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.run compile-check [-- --steps 100]   (~3 min, 2 cores)
Writes bench/results/compile_check.md and .json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from bench.page import save_page
from bench.reporting import provenance, table
from polyalign.config import load_recipe
from polyalign.data.prepare import PrepareConfig, discover_corpus, prepare
from polyalign.quickstart import SAMPLE_DATA, TATOEBA
from polyalign.train import pretrain

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 0.01


def train(prepared: Path, out: Path, steps: int, compile_: bool) -> dict:
    overrides = [f"data.prepared={prepared}", f"trainer.max_steps={steps}", f"trainer.compile={str(compile_).lower()}"]
    began = time.perf_counter()
    pretrain(load_recipe("quickstart", overrides), out, progress=False)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {
        "seconds": time.perf_counter() - began,
        "compile_seconds": records[0].get("compile_seconds", 0.0),
        "loss_path": records[0]["loss_path"],
        "steps": [r["step"] for r in records],
        "losses": [r["loss"] for r in records],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared"
        corpus = discover_corpus(SAMPLE_DATA / "mono", SAMPLE_DATA / "parallel")
        prepare(corpus, PrepareConfig(out=prepared, vocab_size=4000, exclude=[TATOEBA], progress=False))
        arms = {
            name: train(prepared, Path(tmp) / name, args.steps, name == "compiled") for name in ("eager", "compiled")
        }
    eager, compiled = arms["eager"]["losses"][-1], arms["compiled"]["losses"][-1]
    saved = {
        "provenance": provenance(f"python -m bench.run compile-check -- --steps {args.steps}"),
        "torch": torch.__version__,
        "steps": args.steps,
        "limit": LIMIT,
        "relative_difference": abs(compiled - eager) / eager,
        "arms": arms,
    }
    save_page(ROOT / "bench" / "results" / "compile_check.json", saved, page_parts(saved))
    print(f"final loss eager {eager:.4f}, compiled {compiled:.4f}: {saved['relative_difference']:.2%} apart")


def page_parts(saved: dict) -> list:
    """The compile check's page (bench/page.py draws it from the JSON's copy)."""
    arms, difference = saved["arms"], saved["relative_difference"]
    verdict = "met" if difference <= saved["limit"] else "not met"
    steps = arms["eager"]["steps"]
    lines = [
        "# The quickstart recipe compiled (Inductor, CPU) against eager, same seed",
        "",
        saved["provenance"],
        "",
        f"torch {saved['torch']}; {saved['steps']} steps each; the loss logged every {steps[0]} steps (the mean over "
        "them). Compiled: each encoder layer and the MLM loss compiled on their own.",
        "",
        table(
            ["arm", "seconds", "of which compiling (first step)", "loss path", *[f"loss at {s}" for s in steps]],
            [
                [name, f"{a['seconds']:.1f}", f"{a['compile_seconds']:.1f}", a["loss_path"]]
                + [f"{x:.4f}" for x in a["losses"]]
                for name, a in arms.items()
            ],
            align="lrrl" + "r" * len(steps),
        ),
        f"Acceptance: the final losses within {saved['limit']:.0%} of each other: {difference:.2%} apart, {verdict}.",
    ]
    return lines
