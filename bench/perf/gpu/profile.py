"""Where an MLM training step's time goes on the card: 3 steps through the trainer's own `train_step` at 512-token
rows (the throughput step's sizes), after one that compiles. torch.profiler's top kernels by device time, graph
breaks and graphs compiled after the first step (torch._dynamo's counters), host syncs (each a warning under
`torch.cuda.set_sync_debug_mode("warn")`), and the loss path the trainer records."""

from __future__ import annotations

import dataclasses
import warnings

from bench.perf.gpu.step import NO_CUDA, UNFINISHED, Step, device_name, one_line
from bench.perf.gpu.throughput import PACK, arm_recipe, data_for, sizes

STEPS, TOP = 3, 12


def step_profile(step: Step) -> None:
    import torch
    from torch._dynamo.utils import counters

    from polyalign.config import objectives_reading_unpacked_rows
    from polyalign.train.loop import log_window, start_loader, train_step
    from polyalign.train.run import build_run

    cuda = device_name(step) == "cuda"
    if not cuda and not step.dry_run:
        step.part("mlm", status=NO_CUDA)
        return
    if (prepared := data_for(step)) is None:
        return
    step.part("mlm", status=UNFINISHED)
    recipe = arm_recipe("mlm", prepared, list(sizes(step)))
    if not objectives_reading_unpacked_rows(recipe):
        recipe = arm_recipe("mlm", prepared, [*sizes(step), PACK])
    run, _ = build_run(recipe, step.work / "runs" / "profile")  # writes nothing: this never saves
    loader = start_loader(run)
    try:
        items = [next(loader) for _ in range(1 + STEPS)]
    finally:
        loader.close()
    counters.clear()

    def one(item) -> None:
        train_step(run, dataclasses.replace(item, step=run.step))

    one(items[0])  # compiles (when the trainer compiles)
    graphs = counters["stats"]["unique_graphs"]
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with warnings.catch_warnings(record=True) as caught, torch.profiler.profile(activities=activities) as prof:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            for item in items[1:]:
                one(item)
            if cuda:
                torch.cuda.synchronize()
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
    syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message).lower()]
    logged = log_window(run, None) or {}
    step.part(
        "mlm",
        status="ok",
        rows=f"{recipe.data.mono.max_length + 2} tokens" if hasattr(recipe.data.mono, "max_length") else "recipe's",
        packed=recipe.data.pack is True,
        loss_path=logged.get("loss_path", "not recorded"),
        graph_breaks=sum(counters["graph_break"].values()),
        graphs_compiled_after_the_first_step=counters["stats"]["unique_graphs"] - graphs,
        host_syncs=len(syncs),
        first_sync=one_line(syncs[0]) if syncs else "none",
        torch=torch.__version__,
    )
    for name, ms, calls in top_kernels(prof, cuda):
        step.part(f"kernel: {name[:90]}", status="ok", ms_per_step=ms / STEPS, calls_per_step=calls / STEPS)


def top_kernels(prof, cuda: bool) -> list[tuple[str, float, int]]:
    """The TOP events by their own time on the device (on the CPU: by their own CPU time), in ms over the steps."""
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0), reverse=True)[:TOP]
    return [(e.key, getattr(e, key, 0) / 1e3, e.count) for e in events]
