"""Training throughput as users train: recipes through the trainer's own step (polyalign/train: `build_run`,
`start_loader`, `train_step`, as `polyalign pretrain` runs them) at XLM-R-base size (12 x 768, 12 heads, FFN 3072)
with 512-token rows (`data.*.max_length=510`) on the carried data pack's real text, packed (`data.pack=true`) where
every objective of the recipe reads packed rows. MLM, TLM and XLM-E first (`FIRST`), the other arms with time left.
Per arm: tokens/s (real tokens), MFU from model FLOPs (the trainer's `model_flops`: real tokens, the MLM head at the
real masked count) and from its padded count (`flops`, hardware FLOPs), against the card's dense bf16 peak and the
measured 8192^3 bf16 matmul; peak memory; row length, batch, loss path, torch and transformers versions. Beside
transformers where a peer exists (MLM: XLMRobertaForMaskedLM; RTD: ELECTRA's generator and ElectraForPreTraining)
on the same batches in turn (bench/perf/speed.py's `compare_on_same_batches`)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from bench.perf.gpu.step import NO_CUDA, UNFINISHED, Step, device_name, one_line, sample_prepared

GPU_SIZES = (
    "model.hidden_size=768",
    "model.num_layers=12",
    "model.num_heads=12",
    "model.ffn_size=3072",
    "model.max_positions=512",
    "data.mono.max_length=510",
    "data.parallel.max_length=510",
    "data.mono.max_tokens=16384",
    "data.parallel.max_tokens=16384",
    "trainer.loader_workers=4",
)
DRY_SIZES = (
    "model.hidden_size=32",
    "model.num_layers=2",
    "model.num_heads=2",
    "model.ffn_size=64",
    "data.mono.max_tokens=512",
    "data.parallel.max_tokens=512",
    "trainer.loader_workers=0",
)
COLD = ("trainer.train_only=[]",)  # every parameter trains: a random start has no pretrained part to hold
PEERS = {  # peer: (the transformers stack, the objective whose batches it trains on, its builder in speed.py)
    "xlmr": ("transformers XLMRobertaForMaskedLM", "mlm", "xlmr_mlm"),
    "electra": ("transformers ELECTRA (ElectraForMaskedLM + ElectraForPreTraining)", "mrtd", "electra_rtd"),
}
NO_GATED_BIAS = ("model.position_bias=none", "model.absolute_positions=true")
ROWS_512 = ("data.mono.max_length=510", "model.max_positions=512")  # 512-token rows, <s> and </s> included
UNPAD, PADDED = "data.unpad=true", "data.pack=false"
# arm: (recipe, overrides, transformers peer); together they train every registered objective. The most asked-about
# come first: a loan shared with other steps measures the first few.
ARMS = {
    "mlm, in turn with transformers": ("mlm", (), "xlmr"),
    "xlm-e (MRTD + TRTD), gated relative bias": ("xlm-e", (), None),
    "xlm-e without its gated bias (absolute positions)": ("xlm-e", NO_GATED_BIAS, None),
    # Unpadding (model/unpadded.py) beside packed and padded rows at 512-token rows; tokens/s count real tokens.
    "mlm at 512-token rows, unpadded": ("mlm", (*ROWS_512, UNPAD), None),
    "mlm at 512-token rows, packed": ("mlm", ROWS_512, None),
    "mlm at 512-token rows, padded": ("mlm", (*ROWS_512, PADDED), None),
    "xlm-e at 512-token rows, gated bias gathered once per layer": ("xlm-e", ROWS_512, None),
    "xlm-e at 512-token rows without its gated bias, unpadded": ("xlm-e", (*ROWS_512, *NO_GATED_BIAS, UNPAD), None),
    "xlm (MLM + TLM)": ("xlm", (), None),
    "xlm-e-mono (MRTD) without its gated bias, in turn with transformers": ("xlm-e-mono", NO_GATED_BIAS, "electra"),
    "ernie-m (MLM + TLM + CAMLM + BTMLM)": ("ernie-m", (), None),
    "veco (CA-MLM + TLM)": ("veco", COLD, None),
    "xlm-align (MLM + DWA)": ("xlm-align", ("objectives.1.config.allow_cold_start=true",), None),
    "ppa (MoCo)": ("ppa", (), None),
    "quickstart (contrast + TLM)": ("quickstart", (), None),
    "self-align": ("self-align", (*COLD, "objectives.0.config.allow_cold_start=true"), None),
    "mlm": ("mlm", (), None),
}
FIRST = ("mlm, in turn with transformers", "xlm (MLM + TLM)", "xlm-e (MRTD + TRTD), gated relative bias")
"""What the check must measure first (MLM, TLM and XLM-E at 512-token rows); the other arms with time left."""
WARMUP, STEPS = 3, 10  # the dry run: 1 and 1
PACK = "data.pack=true"


def data_for(step: Step) -> Path | None:
    """The carried data pack's prepared folder on the GPU; the bundled sample, prepared once, in the dry run."""
    from bench.perf.gpu_pack import DEFAULT_PACK

    if step.dry_run:
        return sample_prepared(step)
    if (DEFAULT_PACK / "pack.json").is_file():
        return DEFAULT_PACK / "prepared"
    step.part("all", status="skipped: no data pack (python -m bench.run gpu-pack; carry bench/work/gpu-pack)")
    return None


def step_throughput(step: Step) -> None:
    import torch

    from polyalign.config import objectives_reading_unpacked_rows

    if not torch.cuda.is_available() and not step.dry_run:
        step.part("all", status=NO_CUDA)
        return
    if (prepared := data_for(step)) is None:
        return
    device = torch.device(device_name(step))
    peaks = peak_rates(step, device)
    warmup, timed = counts(step)
    step.note(
        f"recipes at {'tiny' if step.dry_run else 'XLM-R-base'} size ({', '.join(sizes(step))}) on {prepared}, "
        "packed rows (data.pack=true) where every objective of the recipe reads them, padded rows elsewhere; "
        f"{warmup} warm-up steps, then up to {timed} timed, each waiting for the device, on batches the loader made "
        f"first; MFU = FLOPs per second / {peaks}"
    )
    for arm in sorted(ARMS, key=lambda a: (a not in FIRST, FIRST.index(a) if a in FIRST else 0)):
        recipe_name, overrides, peer = ARMS[arm]
        if step.left() < 20 and not step.dry_run:
            step.part(arm, status="skipped: step budget spent")
            continue
        step.part(arm, status=UNFINISHED, recipe=recipe_name)
        try:
            recipe = arm_recipe(recipe_name, prepared, [*sizes(step), *overrides])
            if not objectives_reading_unpacked_rows(recipe) and PADDED not in overrides:
                recipe = arm_recipe(recipe_name, prepared, [*sizes(step), *overrides, PACK])
            step.part(arm, packed=recipe.data.pack is True, **versions())
            record, peers = measure_recipe(recipe, step, peer)
            step.part(arm, **record)
            for title, peer_record in peers.items():  # a row of its own in the step's table
                step.part(f"{title}, the row above's batches", **peer_record)
        except Exception as e:  # noqa: BLE001  (an out-of-memory arm must not take the others with it)
            step.part(arm, status=f"failed: {type(e).__name__}: {one_line(str(e))}")
        release(device)


def versions() -> dict:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def sizes(step: Step) -> tuple[str, ...]:
    return DRY_SIZES if step.dry_run else GPU_SIZES


def arm_recipe(name: str, prepared: Path, overrides: list[str]):
    from polyalign.config import load_recipe

    return load_recipe(name, [f"data.prepared={prepared}", "trainer.warmup_steps=1", *overrides])


def counts(step: Step) -> tuple[int, int]:
    """Warm-up and timed steps of an arm."""
    return (1, 1) if step.dry_run else (WARMUP, STEPS)


def peak_rates(step: Step, device) -> str:
    """The two peaks MFU is read against (also kept on the step's record)."""
    import torch

    from bench.perf.gpu.environment import peak_bf16_tflops

    sheet = peak_bf16_tflops(torch.cuda.get_device_name(0)) if device.type == "cuda" else None
    measured = matmul_peak_tflops(device, 256 if step.dry_run else 8192)
    step.result["peaks"] = {"data_sheet_tflops": sheet, "measured_matmul_tflops": measured}
    step.save()
    return f"{sheet or 'unknown'} (data sheet) and {measured:.0f} TFLOP/s (measured bf16 matmul)"


def measure_recipe(recipe, step: Step, peer: str | None) -> tuple[dict, dict]:
    """Build the run as `polyalign pretrain` does, then time its `train_step`s on batches its loader made first;
    with a `peer` (of `PEERS`), round-robin with that transformers stack on the same batches. (ours, {peer: theirs})."""
    import torch

    from bench.perf import speed
    from bench.perf.speed import compare_on_same_batches, training_step
    from polyalign.device import to_device
    from polyalign.train.loop import start_loader, train_step
    from polyalign.train.run import build_run

    cuda = torch.cuda.is_available() and not step.dry_run
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    run, _ = build_run(recipe, step.work / "runs" / recipe.name)  # writes nothing: this never saves
    loader = start_loader(run)
    warmup, steps = counts(step)
    try:
        items = [next(loader) for _ in range(warmup + steps)]  # the same batches for every arm of the round
    finally:
        loader.close()
    flops_before, model_flops_before = [], []

    def ours(item) -> float:
        flops_before.append(run.window.flops)
        model_flops_before.append(getattr(run.window, "model_flops", 0.0))
        summed = run.window.loss  # the window adds up the steps' losses on the device
        train_step(run, dataclasses.replace(item, step=run.step))
        return float(run.window.loss - (0.0 if summed is None else summed))  # waits for the device

    arms = {"polyalign": lambda: ours}
    if peer is not None:
        title, objective, builder = PEERS[peer]
        module, loss_of = getattr(speed, builder)(run.module.model.config, run.tokenizer.special, run.device)
        autocast = torch.autocast(run.device.type, dtype=torch.bfloat16)
        pad = run.tokenizer.special.pad
        padded = {id(item): padded_examples(item.slots[0][objective], pad) for item in items}  # made before timing
        step_of = lambda item: loss_of(to_device(padded[id(item)], run.device))  # noqa: E731
        arms[title] = lambda: training_step(module, step_of, recipe.trainer.lr, autocast)
    t0 = time.perf_counter()
    measured = compare_on_same_batches(arms, items, warmup, steps, keep_going=lambda: step.left() > 10)
    flops = run.window.flops - flops_before[warmup]
    tokens = sum(item.tokens for item in items[warmup : warmup + len(measured["polyalign"]["seconds"])])
    record = rates(measured["polyalign"], tokens, flops, step.result["peaks"])
    if hasattr(run.window, "model_flops"):  # the model's useful work: real tokens, the head at the masked count
        model = rates(
            measured["polyalign"], tokens, run.window.model_flops - model_flops_before[warmup], step.result["peaks"]
        )
        record |= {f"model_flops_{k}": model[k] for k in ("tflops_per_s", "mfu_percent")}
    batches = [b for item in items[warmup:] for b in item.slots[0].values() if isinstance(b, dict)]
    shapes = [tuple(b["input_ids"].shape) for b in batches if "input_ids" in b]
    record |= {"rows_x_tokens": " / ".join(sorted({f"{b} x {t}" for b, t in shapes})), "loss_path": loss_path(run)}
    # Beside transformers, both stacks' weights and optimizer states are on the card at once.
    record["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else "n/a (CPU)"
    record["seconds_in_all"] = time.perf_counter() - t0
    peers = {name: rates(m, tokens, flops, step.result["peaks"]) for name, m in measured.items() if name != "polyalign"}
    for theirs in peers.values():
        record["speedup_over_transformers"] = theirs["s_per_step"] / record["s_per_step"]
    return record, peers


def padded_examples(batch: dict, pad: int) -> dict:
    """A packed batch's examples one per row, padded to its longest (the batch transformers is usually given):
    input_ids, attention_mask, labels. A batch that is not packed is returned as it is."""
    import torch

    if "example_ids" not in batch:
        return batch
    ids = batch["example_ids"].reshape(-1)
    keep = ids >= 0
    order = torch.argsort(ids[keep], stable=True)  # each example's tokens stay in their order
    example = ids[keep][order]
    counts = torch.bincount(example)
    column = torch.arange(example.numel()) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
    out = {}
    for key, fill in (("input_ids", pad), ("attention_mask", 0), ("labels", -100)):
        values = batch[key].reshape(-1)[keep][order]
        out[key] = torch.full((counts.numel(), int(counts.max())), fill, dtype=values.dtype)
        out[key][example, column] = values
    return out


def loss_path(run) -> str:
    """The loss path the trainer records on its first log line (where it records one)."""
    from polyalign.train.loop import log_window

    return (log_window(run, None) or {}).get("loss_path", "not recorded")


def rates(measured: dict, tokens: int, flops: float, peaks: dict) -> dict:
    """tokens/s and MFU of timed steps; `flops` the objectives' count over those steps (the same for a peer)."""
    seconds, done = sum(measured["seconds"]), len(measured["seconds"])
    tflops = flops / seconds / 1e12
    sheet, matmul = peaks["data_sheet_tflops"], peaks["measured_matmul_tflops"]
    return {
        "status": "ok",
        "steps": done,
        "s_per_step": seconds / done,
        "tokens_per_s": tokens / seconds,
        "tflops_per_s": tflops,
        "mfu_percent": 100 * tflops / sheet if sheet else "unknown",
        "mfu_percent_of_measured_matmul": 100 * tflops / matmul,
        "warmup_seconds": measured["warmup_seconds"],
        "last_loss": measured["losses"][-1],
    }


def matmul_peak_tflops(device, n: int, seconds: float = 1.0) -> float:
    """TFLOP/s of an n x n x n bf16 matrix product, repeated for `seconds`: what the card sustains on dense work."""
    import torch

    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    (a @ b).sum().item()  # warm-up (cuBLAS handle and kernel choice)
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        count += 1
        if device.type == "cuda" and count % 10 == 0:
            torch.cuda.synchronize()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return 2 * n**3 * count / (time.perf_counter() - t0) / 1e12


def release(device) -> None:
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    torch._dynamo.reset()  # a compiled run's graphs hold its model
