"""Step 3 of the GPU check: training throughput at XLM-R base size, polyalign's MLM step against transformers'
XLMRobertaForMaskedLM on the same batches."""

from __future__ import annotations

import importlib
import itertools
import sys
import time

from bench.perf.gpu.environment import peak_bf16_tflops
from bench.perf.gpu.step import NO_CUDA, ROOT, UNFINISHED, Sizes, Step, device_name, one_line


def throughput_module():
    """bench/perf/throughput.py: its training step is reused (the repository root is on sys.path for `bench`)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("bench.perf.throughput")


def step_throughput(step: Step) -> None:
    import torch

    if not torch.cuda.is_available() and not step.dry_run:
        step.part("all", status=NO_CUDA)
        return
    s, device = step.sizes, torch.device(device_name(step))
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    peak = peak_bf16_tflops(name) if device.type == "cuda" else None
    step.note(
        f"{s.throughput_model['num_layers']} layers x {s.throughput_model['hidden_size']}, vocabulary "
        f"{s.throughput_model['vocab_size']:,}, batch {s.batch} x {s.length} tokens, bf16 autocast, dropout 0.1; "
        f"{s.warmup} warm-up steps, then up to {s.steps} timed; MFU = model FLOPs (polyalign/flops.py, MLM head at "
        f"masked positions only) / {peak or 'unknown'} TFLOP/s ({name}); a step = forward, loss, backward, "
        "clipping, fused AdamW (bench/throughput.py's training_step, the same for both stacks)"
    )
    bench = throughput_module()
    special = bench.special_tokens(s.throughput_model["vocab_size"])
    batches = [bench.synthetic_batch(s.batch, s.length, seed, special) for seed in range(2)]
    arms = {
        "polyalign": lambda: polyalign_arm(s, device),
        "transformers": lambda: transformers_arm(s, device),
        "polyalign + activation checkpointing": lambda: polyalign_arm(s, device, checkpointing=True),
        f"polyalign + torch.compile ({s.compile_backend})": lambda: polyalign_arm(s, device, compiled=True),
    }
    for arm, build in arms.items():
        # An arm may start only with time left for its warm-up and steps; otherwise say so and go on.
        if step.left() < 15 and not step.dry_run:
            step.part(arm, status="skipped: step budget spent")
            continue
        step.part(arm, status=UNFINISHED)
        try:
            step.part(arm, **measure_arm(build, batches, s, device, peak, step))
        except Exception as e:  # noqa: BLE001  (an out-of-memory arm must not take the others with it)
            step.part(arm, status=f"failed: {type(e).__name__}: {one_line(str(e))}")
        release(device)


def throughput_config(s: Sizes):
    from polyalign.model import EncoderConfig

    return EncoderConfig(**s.throughput_model, max_positions=s.length, dropout=0.1, attention_dropout=0.1)


def polyalign_arm(s: Sizes, device, checkpointing: bool = False, compiled: bool = False):
    """polyalign's MLM objective on its model, as the trainer runs it; returns (module, loss function)."""
    import torch

    from polyalign.model import MaskedLanguageModel
    from polyalign.objectives.mlm import MLM, MLMConfig
    from polyalign.train import PretrainingModule

    config = throughput_config(s)
    with torch.device(device):  # built where it trains: initialising 278M parameters on the CPU takes seconds
        model = MaskedLanguageModel(config)
        objective = MLM(MLMConfig(), throughput_module().special_tokens(config.vocab_size), config)
        module = PretrainingModule(model, {"mlm": objective}, {"mlm": 1.0})
    model.encoder.checkpoint_layers = checkpointing
    forward = torch.compile(module, backend=s.compile_backend) if compiled else module

    def loss(batch):
        total, _, _ = forward({"mlm": batch})
        return total

    return module.train(), loss


def transformers_arm(s: Sizes, device):
    """XLMRobertaForMaskedLM with the configuration polyalign's export writes for the same model."""
    from types import SimpleNamespace

    import torch
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    from polyalign.model.hf import xlmr_config

    c = throughput_config(s)
    special = throughput_module().special_tokens(c.vocab_size)
    mapped = xlmr_config(SimpleNamespace(config=c), SimpleNamespace(special=special), 1)
    config = XLMRobertaConfig.from_dict(mapped)
    with torch.device(device):
        model = XLMRobertaForMaskedLM(config)

    def loss(batch):
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "labels")}
        return model(**inputs).loss

    return model.train(), loss


def measure_arm(build, batches: list[dict], s: Sizes, device, peak: float | None, step: Step) -> dict:
    """Warm-up steps (compilation included), then timed steps until `s.steps` or the step's budget."""
    import torch

    from polyalign.flops import encoder_forward_flops, mlm_head_forward_flops, training_flops

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
    module, loss = build()
    c = throughput_config(s)
    # Model FLOPs, the same for every arm: what it recomputes (checkpointing) or adds (transformers' MLM head at
    # every position) is not model FLOPs.
    flops = [
        training_flops(
            encoder_forward_flops(c, s.batch, s.length) + mlm_head_forward_flops(c, int((b["labels"] != -100).sum()))
        )
        for b in batches
    ]
    turn = itertools.count()  # the batches in turn, the same order for every arm

    def loss_and_flops():
        i = next(turn) % len(batches)
        return loss(batches[i]), flops[i]

    step_fn = throughput_module().training_step(module, loss_and_flops)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)
    t0 = time.perf_counter()
    with autocast:
        for _ in range(s.warmup):
            step_fn()
    warmup_seconds = time.perf_counter() - t0
    losses, done, total_flops = [], 0, 0.0
    t0 = time.perf_counter()
    with autocast:
        while done < s.steps and (done == 0 or step.left() > 5):
            value, f = step_fn()  # returns the loss as a float: the step has finished on the device
            losses.append(value)
            total_flops += f
            done += 1
    seconds = time.perf_counter() - t0
    tflops = total_flops / seconds / 1e12
    return {
        "status": "ok",
        "steps": done,
        "s_per_step": seconds / done,
        "tokens_per_s": done * s.batch * s.length / seconds,
        "model_tflops_per_s": tflops,
        "mfu_percent": 100 * tflops / peak if peak else "unknown",
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else "n/a (CPU)",
        "warmup_seconds": warmup_seconds,
        "last_loss": losses[-1],
    }


def release(device) -> None:
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    torch._dynamo.reset()  # a compiled arm's graphs hold the model
