"""Step 5 of the GPU check: `polyalign evaluate tatoeba --langs tatoeba14 --layers all`, seconds."""

from __future__ import annotations

import json

from bench.perf.gpu.alignment import alignment_model
from bench.perf.gpu.step import NO_CUDA, SAMPLE, SHARED, Step, device_name, polyalign_cli, run_command


def step_tatoeba(step: Step) -> None:
    import torch

    if not torch.cuda.is_available() and not step.dry_run:
        step.part("all", status=NO_CUDA)
        return
    data = SHARED / "data" / "eval" / "tatoeba"
    if step.dry_run:
        data, langs = SAMPLE / "tatoeba", "all"  # the sample's five languages: seconds on a CPU
    elif not data.is_dir():
        step.part("tatoeba-14", status=f"skipped: {data} absent")
        return
    else:
        langs = "tatoeba14"
    model = alignment_model(step)
    if model is None:
        return
    out = step.work / "tatoeba"
    args = ["evaluate", "tatoeba", "--model", str(model), "--data", str(data), "--langs", langs, "--layers", "all"]
    args += ["--out", str(out), "--device", device_name(step), "--no-progress"]
    status, seconds = run_command(step, "tatoeba", polyalign_cli(*args))
    found = {}
    if status == "ok":
        r = json.loads((out / "tatoeba.json").read_text())
        found = {
            "languages": len(r["sizes"]),
            "sentences": 2 * sum(r["sizes"].values()),
            "layers": len(r["sweep"]),
            "acc_at_reported_layer": r["reported"]["average"]["both"],
        }
    step.part(f"tatoeba ({langs})", status=status, seconds=seconds, **found)
