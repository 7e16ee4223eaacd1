"""Parts of a CPU MLM training step, each against the stock PyTorch op it replaces (bf16, `mlm` recipe shapes).

Forward + backward of: attention (SDPA's fused kernel vs polyalign's `attend`), hidden-state dropout
(nn.Dropout vs polyalign's `Dropout`), the MLM cross-entropy (F.cross_entropy on fp32 logits vs
polyalign's `cross_entropy`), the MLM head's projection + loss (logits then `cross_entropy` vs the fused
`linear_cross_entropy`, which `masked_lm_loss` takes on a CPU only if faster), the same with a 250,002-row
vocabulary against the model's padded 250,048 rows (on a CPU the head multiplies by the vocabulary's rows
of the padded matrix only), and one AdamW update of the model's parameters (for-loop vs fused).

Usage: flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.perf.step_parts   (~1 min on 2 cores)
Writes bench/results/step_parts.md and step_parts.json.

`--gated-bias` instead times one training step (forward, backward, AdamW; bf16 autocast) of a 2-layer, 128-wide
encoder with its MLM loss at B 8, T 256 without a position bias (absolute positions), with XLM-E's gated relative
bias gathered once per layer (what the loader's `consecutive_positions` selects), and with it gathered at every
row's own positions (B·T² indices: TLM's `xlm` pairs); the arms in turn, several rounds. Writes
bench/results/gated_bias_step.md and .json (~1 min). Acceptance: the shared gather's step at most 1.8x the unbiased one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.reporting import median_seconds, page_text, provenance, table
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.model.encoder import Dropout, attend, expand_attention_mask
from polyalign.model.losses import cross_entropy, linear_cross_entropy

ROOT = Path(__file__).resolve().parents[2]

B, T, H, HS, C, V = 64, 128, 6, 64, 384, 32000
XLMR_V = 250_002  # XLM-R's vocabulary; the model pads it to 250,048 rows
PREDICTED = B * T * 15 // 100


def seconds(fn, repeats: int = 5) -> float:
    return median_seconds(lambda _: fn(), range(1 + repeats), warmup=1)


def forward_backward(fn, *inputs):
    def run():
        out = fn(*inputs)
        out.backward(torch.ones_like(out) if out.dim() else None)
        for x in inputs:
            x.grad = None

    return run


def head_loss(features, weight, bias, classes: int, how):
    """Forward + backward of the MLM head's projection and loss under bf16 autocast: `plain` (logits, then
    `cross_entropy`), True (`linear_cross_entropy`), False (plain over the first `classes` rows of `weight`
    padded to a multiple of 64 rows, as `MaskedLMHead` does on a CPU)."""
    target = torch.randint(0, classes, (features.shape[0],))
    if how is False:
        rows = -(-classes // 64) * 64
        weight = torch.cat([weight.detach(), weight.new_zeros(rows - classes, weight.shape[1])]).requires_grad_()
        bias = torch.cat([bias.detach(), bias.new_zeros(rows - classes)]).requires_grad_()

    def loss(x, w, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if how is True:
                return linear_cross_entropy(x, w, b, target, classes)
            return cross_entropy(F.linear(x, w[:classes], b[:classes]), target)

    return forward_backward(loss, features, weight, bias)


def main() -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    bf16 = dict(dtype=torch.bfloat16, requires_grad=True)
    q, k, v = (torch.randn(B, H, T, HS, **bf16) for _ in range(3))
    mask = expand_attention_mask(torch.arange(T)[None] < torch.randint(T // 2, T + 1, (B, 1)), B, T, T, "cpu")
    hidden = torch.randn(B, T, C, **bf16)
    logits = (3 * torch.randn(PREDICTED, V)).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, V, (PREDICTED,))
    no_dropout, dropout, reference_dropout = Dropout(0.0), Dropout(0.1).train(), torch.nn.Dropout(0.1).train()

    parts = {
        f"attention (B={B}, H={H}, T={T}, hs={HS})": (
            forward_backward(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), q, k, v),
            forward_backward(lambda q, k, v: attend(q, k, v, mask, no_dropout), q, k, v),
        ),
        f"dropout p=0.1 on ({B}, {T}, {C})": (
            forward_backward(reference_dropout, hidden),
            forward_backward(dropout, hidden),
        ),
        f"MLM cross-entropy ({PREDICTED} x {V})": (
            forward_backward(lambda x: F.cross_entropy(x.float(), target), logits),
            forward_backward(lambda x: cross_entropy(x, target), logits),
        ),
    }
    features = torch.randn(PREDICTED, C, requires_grad=True)
    for name, rows, fused in (
        (f"MLM head projection + loss ({PREDICTED} x {C} -> {V})", V, True),
        (f"the same, {XLMR_V:,} rows -> padded {-(-XLMR_V // 64) * 64:,}", XLMR_V, False),
    ):
        weight, bias = torch.randn(rows, C, requires_grad=True), torch.zeros(rows, requires_grad=True)
        parts[name] = (head_loss(features, weight, bias, rows, "plain"), head_loss(features, weight, bias, rows, fused))
    model = MaskedLanguageModel(EncoderConfig(vocab_size=V, hidden_size=C, num_layers=6, num_heads=H, ffn_size=1536))
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    loop = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    fused = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    millions = sum(p.numel() for p in model.parameters()) / 1e6
    parts[f"AdamW update, `mlm` model ({millions:.1f}M parameters)"] = (loop.step, fused.step)

    rows = {}
    for name, (stock, ours) in parts.items():
        a, b = seconds(stock), seconds(ours)
        rows[name] = {"stock_ms": 1000 * a, "polyalign_ms": 1000 * b, "speedup": a / b}
        print(f"{name:50s} stock {1000 * a:8.1f} ms  polyalign {1000 * b:8.1f} ms  {a / b:5.2f}x", flush=True)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    command = "flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.perf.step_parts"
    saved = {"provenance": provenance(command), "load_average_1min": load, "parts": rows}
    (out / "step_parts.json").write_text(json.dumps(saved, indent=2) + "\n")
    write_page(saved, out / "step_parts.md")


def write_page(saved: dict, page: Path) -> Path:
    """The page from what the bench saved (its JSON)."""
    lines = [
        "# Parts of a CPU MLM step: stock PyTorch op vs polyalign's replacement",
        "",
        saved["provenance"],
        "",
        "2 threads, bf16 tensors, forward + backward, median of 5 after a warm-up; 1-minute load average "
        f"{saved['load_average_1min']:.1f}.",
        "",
        table(
            ["part", "stock (ms)", "polyalign (ms)", "speed-up"],
            [
                [name, f"{r['stock_ms']:.1f}", f"{r['polyalign_ms']:.1f}", f"{r['speedup']:.2f}x"]
                for name, r in saved["parts"].items()
            ],
            align="lrrr",
        ),
    ]
    page.write_text(page_text(lines))
    return page


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


def gated_bias_step() -> None:
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
    command = "flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.perf.step_parts --gated-bias"
    saved = {
        "provenance": provenance(command),
        "load_average_1min": os.getloadavg()[0],
        "sizes": GATED,
        "rounds": GATED_ROUNDS,
        "steps_per_round": GATED_STEPS,
        "limit": GATED_LIMIT,
        "arms": arms,
    }
    out = ROOT / "bench" / "results"
    (out / "gated_bias_step.json").write_text(json.dumps(saved, indent=2) + "\n")
    write_gated_page(saved, out / "gated_bias_step.md")


def write_gated_page(saved: dict, page: Path) -> Path:
    """The gated-bias page from its JSON."""
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
    page.write_text(page_text(lines))
    return page


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gated-bias", action="store_true", help="time the gated relative bias's training step only")
    if parser.parse_args().gated_bias:
        gated_bias_step()
    else:
        main()
