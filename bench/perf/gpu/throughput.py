"""Step 3 of the GPU check: training throughput at XLM-R base size, polyalign's MLM step against transformers'
XLMRobertaForMaskedLM on the same batches (bench/perf/speed.py), then polyalign with activation checkpointing and
with torch.compile. tokens/s, MFU against the card's dense bf16 peak, peak memory."""

from __future__ import annotations

from bench.perf.gpu.environment import peak_bf16_tflops
from bench.perf.gpu.step import NO_CUDA, UNFINISHED, Step, device_name, one_line


def step_throughput(step: Step) -> None:
    import torch

    from bench.perf.speed import PRESETS, polyalign_mlm, special_tokens, synthetic_batch, transformers_mlm

    if not torch.cuda.is_available() and not step.dry_run:
        step.part("all", status=NO_CUDA)
        return
    s, backend, device = PRESETS[step.sizes.throughput], step.sizes.compile_backend, torch.device(device_name(step))
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    peak = peak_bf16_tflops(name) if device.type == "cuda" else None
    step.note(
        f"{s.model['num_layers']} layers x {s.model['hidden_size']}, vocabulary "
        f"{s.model['vocab_size']:,}, batch {s.batch} x {s.length} tokens, bf16 autocast, dropout {s.dropout}; "
        f"{s.warmup} warm-up steps, then up to {s.steps} timed; MFU = model FLOPs (polyalign/flops.py, MLM head at "
        f"masked positions only) / {peak or 'unknown'} TFLOP/s ({name}); a step = forward, loss, backward, "
        "clipping, fused AdamW (bench/perf/speed.py's training_step, the same for both stacks)"
    )
    special = special_tokens(s.model["vocab_size"])
    batches = [synthetic_batch(s.batch, s.length, seed, special) for seed in range(2)]
    arms = {
        "polyalign": lambda: polyalign_mlm(s, device),
        "transformers": lambda: transformers_mlm(s, device),
        "polyalign + activation checkpointing": lambda: polyalign_mlm(s, device, checkpointing=True),
        f"polyalign + torch.compile ({backend})": lambda: polyalign_mlm(s, device, compile_backend=backend),
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


def measure_arm(build, batches: list[dict], s, device, peak: float | None, step: Step) -> dict:
    """One arm alone on the device (four XLM-R-base copies and their AdamW states need not fit at once): warm-up
    steps (compilation included), then timed steps until the preset's count or the step's budget."""
    import torch

    from bench.perf.speed import compare_on_same_batches, encoder_config, mlm_model_flops, training_step

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)

    def arm_step():
        module, loss_of = build()
        return training_step(module, loss_of, s.learning_rate, autocast)

    run = compare_on_same_batches({"arm": arm_step}, batches, s.warmup, s.steps, keep_going=lambda: step.left() > 5)[
        "arm"
    ]
    done, seconds = len(run["seconds"]), sum(run["seconds"])
    config = encoder_config(s)
    flops = [mlm_model_flops(config, b) for b in batches]
    tflops = sum(flops[(s.warmup + i) % len(batches)] for i in range(done)) / seconds / 1e12
    return {
        "status": "ok",
        "steps": done,
        "s_per_step": seconds / done,
        "tokens_per_s": done * s.batch * s.length / seconds,
        "model_tflops_per_s": tflops,
        "mfu_percent": 100 * tflops / peak if peak else "unknown",
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else "n/a (CPU)",
        "warmup_seconds": run["warmup_seconds"],
        "last_loss": run["losses"][-1],
    }


def release(device) -> None:
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    torch._dynamo.reset()  # a compiled arm's graphs hold the model
