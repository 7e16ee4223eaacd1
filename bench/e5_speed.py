"""Continued training of multilingual-e5-small on 2 cores: polyalign's step against transformers' on the same batches
(bench/perf/speed.py's comparison at its `continued-250k` preset).

The batches: TLM (PPA layout, 15% masked) on en-xx pairs of ../shared/data/train/parallel, 16 pairs of up to 64
tokens a side. Every step is forward (bf16 autocast) + backward + clipping + fused AdamW, timed after two warm-up
steps, the variants one step each per round:
- transformers: BertForMaskedLM (the same config), `labels` given as HF computes them
  (logits over the 250k vocabulary at every position);
- polyalign, the `xlm` recipe's step (TLM; MLM logits at masked positions only), embeddings trained and held;
- polyalign, the `xlm-align` recipe's step (DWA: TLM + OT self-labels + the pointer loss, one forward pass);
- polyalign, the `self-align` recipe's step (embeddings held; its encoder stops at layer 8).
And where polyalign's TLM step goes: encoder forward + backward, the masked-only MLM output against a full one,
the optimizer over all parameters against the encoder layers only, DWA's OT self-labelling.
"""

from __future__ import annotations

import gzip
import statistics
from functools import partial
from pathlib import Path

import numpy as np
import torch

from bench.perf.speed import PRESETS, compare_on_same_batches, training_step
from bench.reporting import median_seconds

SHARED = Path(__file__).resolve().parents[2] / "shared"
PRESET = PRESETS["continued-250k"]
PAIRS, MAX_LENGTH, STEPS, WARMUP = PRESET.batch, PRESET.length, PRESET.steps, PRESET.warmup
LANGUAGES = ("de", "fr", "ro", "zh", "ja", "hi")


def raw_batches(tokenizer, count: int):
    """`count` ParallelBatches of PAIRS en-xx pairs, the languages in turn."""
    from polyalign.data.streams import ParallelBatch

    batches = []
    for k in range(count):
        lang = LANGUAGES[k % len(LANGUAGES)]
        base = SHARED / "data/train/parallel" / f"en-{lang}"
        with gzip.open(f"{base}.en.gz", "rt") as en, gzip.open(f"{base}.{lang}.gz", "rt") as xx:
            lines = [(a.strip(), b.strip()) for _, a, b in zip(range((k + 1) * PAIRS), en, xx, strict=False)][-PAIRS:]
        source = [np.array(ids[:MAX_LENGTH]) for ids in tokenizer.encode_batch([a for a, _ in lines])]
        target = [np.array(ids[:MAX_LENGTH]) for ids in tokenizer.encode_batch([b for _, b in lines])]
        batches.append(ParallelBatch(source, target, np.zeros(PAIRS, dtype=np.int64), np.ones(PAIRS, dtype=np.int64)))
    return batches


timed = partial(median_seconds, warmup=WARMUP)  # timed(step, batches): median seconds of step(batch)


def polyalign_arm(model, objective, name: str, autocast):
    """The step of one polyalign objective on `model`, on that objective's layout of each batch's pairs."""
    return lambda: training_step(
        model, lambda batch: objective(model, batch[name]).loss, PRESET.learning_rate, autocast
    )


def transformers_arm(hf_model, autocast):
    inputs = ("input_ids", "attention_mask", "position_ids", "labels")
    loss_of = lambda batch: hf_model(**{k: batch["xlm (TLM)"][k] for k in inputs}).loss  # noqa: E731
    return lambda: training_step(hf_model, loss_of, PRESET.learning_rate, autocast)


def hf_bert(config):
    from transformers import BertConfig, BertForMaskedLM

    from polyalign.model.hf import hf_sizes

    return BertForMaskedLM(
        BertConfig(
            **hf_sizes(config),
            max_position_embeddings=config.max_positions,
            layer_norm_eps=config.layer_norm_eps,
            pad_token_id=config.pad_token_id,
            attn_implementation="sdpa",
        )
    ).train()


def measure(e5: Path, prepared: Path | None = None) -> dict:
    """Seconds per step and tokens/s of each variant, and the parts of polyalign's TLM step."""
    import copy

    from polyalign.checkpoint import load_model
    from polyalign.objectives import build_objective

    torch.manual_seed(0)
    loaded = load_model(e5)
    model, special, config = loaded.model.train(), loaded.tokenizer.special, loaded.model.config
    rng = np.random.default_rng(0)
    raws = raw_batches(loaded.tokenizer, WARMUP + STEPS)
    objectives = {
        "xlm (TLM)": build_objective("tlm", {"style": "ppa"}, special, config),
        "xlm-align (DWA)": build_objective("dwa", {"style": "ppa"}, special, config),
        "self-align": build_objective("self_align", {}, special, config),
    }
    # The same pairs for every variant, each in its objective's layout: a batch is {objective: its batch}.
    batches = [{name: o.make_batch(r, rng) for name, o in objectives.items()} for r in raws]
    tokens = statistics.mean(int(b["xlm (TLM)"]["attention_mask"].sum()) for b in batches)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    everything = list(model.parameters())
    layers = [p for n, p in model.named_parameters() if n.startswith("encoder.layers.")]
    tlm = objectives["xlm (TLM)"]
    held = copy.deepcopy(model)
    for name, p in held.named_parameters():
        p.requires_grad_(name.startswith("encoder.layers."))
    arms = {
        "transformers BertForMaskedLM + AdamW (TLM)": transformers_arm(hf_bert(config), autocast),
        "polyalign xlm (TLM)": polyalign_arm(model, tlm, "xlm (TLM)", autocast),
        "polyalign xlm (TLM), embeddings held": polyalign_arm(held, tlm, "xlm (TLM)", autocast),
        "polyalign xlm-align (DWA), embeddings held": polyalign_arm(
            held, objectives["xlm-align (DWA)"], "xlm-align (DWA)", autocast
        ),
        "polyalign self-align, embeddings held": polyalign_arm(held, objectives["self-align"], "self-align", autocast),
    }
    measured = compare_on_same_batches(arms, batches, WARMUP, STEPS)
    seconds = {name: statistics.median(m["seconds"]) for name, m in measured.items()}
    tlm_batches = [b["xlm (TLM)"] for b in batches]
    parts = step_parts(model, tlm, tlm_batches, everything, layers, autocast)
    parts["OT self-labels of DWA (no grad)"] = ot_labelling_seconds(held, objectives["xlm-align (DWA)"], raws, rng)
    reference = seconds["transformers BertForMaskedLM + AdamW (TLM)"]
    return {
        "batch": f"{PAIRS} pairs, up to {MAX_LENGTH} tokens a side, {tokens:.0f} real tokens a batch (mean)",
        "steps": {
            name: {
                "seconds": round(s, 3),
                "tokens_per_s": round(tokens / s),
                "speed_vs_transformers": round(reference / s, 2),
            }
            for name, s in seconds.items()
        },
        "tlm_step_parts": {name: round(s, 3) for name, s in parts.items()},
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def step_parts(model, tlm, batches, everything, layers, autocast) -> dict[str, float]:
    """Where polyalign's TLM step goes, each part timed on its own on the same batches."""
    from polyalign.objectives.base import model_inputs

    def encoder(batch):
        with autocast:
            hidden = model(**model_inputs(batch)).last_hidden_state
        hidden.float().sum().backward()
        model.zero_grad(set_to_none=True)

    def head(masked_only: bool):
        def run(batch):
            hidden = torch.randn(*batch["input_ids"].shape, model.config.hidden_size, requires_grad=True)
            with autocast:
                rows = hidden[batch["labels"] >= 0] if masked_only else hidden.flatten(0, 1)
                logits = model.mlm_logits(rows)
            logits.float().logsumexp(-1).sum().backward()
            model.zero_grad(set_to_none=True)

        return run

    def optimizer_over(params):
        optimizer = torch.optim.AdamW(params, lr=1e-5, fused=True)

        def run(batch):
            for p in params:
                p.grad = torch.zeros_like(p)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return run

    return {
        "encoder forward + backward": timed(encoder, batches),
        "MLM output at masked positions (forward + backward)": timed(head(True), batches),
        "MLM output at every position (forward + backward)": timed(head(False), batches),
        "AdamW over all parameters (embeddings included)": timed(optimizer_over(everything), batches),
        "AdamW over the encoder layers only": timed(optimizer_over(layers), batches),
    }


def ot_labelling_seconds(model, dwa, raws, rng) -> float:
    """DWA's self-labelling alone: the unmasked forward pass and the OT aligner, without gradient."""
    return timed(lambda batch: dwa.self_label(model, batch), [dwa.make_batch(r, rng) for r in raws])
