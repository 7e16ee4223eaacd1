"""One CPU training step (forward, backward, AdamW; bf16 autocast) of a 2-layer, 128-wide encoder with its MLM loss
at B 8, T 256: without a position bias (absolute positions), with XLM-E's gated relative bias gathered once per layer
(what the loader's `consecutive_positions` selects), and with it gathered at every row's own positions (B·T²
indices: TLM's `xlm` pairs); the arms in turn, several rounds. Acceptance: the shared gather's step at most 1.8x the
unbiased one.

Usage: flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.run gated-bias-step   (~1 min on 2 cores)
Writes bench/results/gated_bias_step.md and .json.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.page import save_page
from bench.reporting import provenance, table
from polyalign.model import EncoderConfig, MaskedLanguageModel

ROOT = Path(__file__).resolve().parents[2]

GATED = {"B": 8, "T": 256, "hidden_size": 128, "num_layers": 2, "num_heads": 4, "ffn_size": 512, "vocab_size": 2000}
GATED_ARMS = {  # arm: (encoder overrides, the batch's consecutive_positions)
    "no position bias (absolute positions)": ({}, False),
    "gated relative bias, one gather per layer": (
        {"position_bias": "gated_relative", "absolute_positions": False},
        True,
    ),
    "gated relative bias, each row's positions": (
        {"position_bias": "gated_relative", "absolute_positions": False},
        False,
    ),
}
GATED_ROUNDS, GATED_STEPS, GATED_LIMIT = 5, 5, 1.8


def main() -> None:
    """Steps of the three GATED_ARMS in turn, GATED_ROUNDS rounds of GATED_STEPS timed steps each (one untimed
    first); the median step per arm and the ratios to the unbiased one."""
    torch.set_num_threads(2)
    g = GATED
    B, T = g["B"], g["T"]
    positions = torch.arange(T).expand(B, T)
    steps = {}
    for arm, (overrides, consecutive) in GATED_ARMS.items():
        torch.manual_seed(0)
        sizes = {k: v for k, v in g.items() if k not in ("B", "T")}
        model = MaskedLanguageModel(
            EncoderConfig(**sizes, max_positions=T, dropout=0.0, attention_dropout=0.0, **overrides)
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        ids = torch.randint(5, g["vocab_size"], (B, T))
        labels = torch.where(torch.rand(B, T) < 0.15, ids, -100)

        def step(model=model, optimizer=optimizer, ids=ids, labels=labels, consecutive=consecutive):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                hidden = model(ids, position_ids=positions, consecutive_positions=consecutive).last_hidden_state
                targets = labels != -100
                loss = F.cross_entropy(model.mlm_logits(hidden[targets]).float(), labels[targets])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        step()  # warm-up
        steps[arm] = step
    seconds = {arm: [] for arm in GATED_ARMS}
    for _ in range(GATED_ROUNDS):
        for arm, step in steps.items():
            for _ in range(GATED_STEPS):
                t0 = time.perf_counter()
                step()
                seconds[arm].append(time.perf_counter() - t0)
    median = {arm: statistics.median(s) for arm, s in seconds.items()}
    bare = median["no position bias (absolute positions)"]
    arms = {
        arm: {"median_ms": 1000 * m, "ratio_to_no_bias": m / bare, "step_ms": [1000 * x for x in seconds[arm]]}
        for arm, m in median.items()
    }
    for arm, r in arms.items():
        print(f"{arm:45s} {r['median_ms']:8.1f} ms  {r['ratio_to_no_bias']:.2f}x", flush=True)
    command = "python -m bench.run gated-bias-step"
    saved = {
        "provenance": provenance(command),
        "load_average_1min": os.getloadavg()[0],
        "sizes": GATED,
        "rounds": GATED_ROUNDS,
        "steps_per_round": GATED_STEPS,
        "limit": GATED_LIMIT,
        "arms": arms,
    }
    save_page(ROOT / "bench" / "results" / "gated_bias_step.json", saved, page_parts(saved))


def page_parts(saved: dict) -> list:
    """The gated-bias page (bench/page.py draws it from the JSON's copy)."""
    g = saved["sizes"]
    shared = saved["arms"]["gated relative bias, one gather per layer"]["ratio_to_no_bias"]
    verdict = "met" if shared <= saved["limit"] else "not met"
    lines = [
        "# XLM-E's gated relative bias in a CPU training step",
        "",
        saved["provenance"],
        "",
        f"One training step (forward, backward, AdamW; bf16 autocast, 2 threads) of a {g['num_layers']}-layer, "
        f"{g['hidden_size']}-wide encoder ({g['num_heads']} heads, FFN {g['ffn_size']}, vocabulary {g['vocab_size']}) "
        f"with its MLM loss at B {g['B']}, T {g['T']}, every token real; the arms in turn, {saved['rounds']} rounds of "
        f"{saved['steps_per_round']} timed steps; median step. 1-minute load average {saved['load_average_1min']:.1f}.",
        "",
        table(
            ["arm", "median step (ms)", "ratio to no bias"],
            [[arm, f"{r['median_ms']:.1f}", f"{r['ratio_to_no_bias']:.2f}x"] for arm, r in saved["arms"].items()],
            align="lrr",
        ),
        f"Acceptance: the shared gather's step at most {saved['limit']}x the unbiased one: {shared:.2f}x, {verdict}.",
    ]
    return lines
