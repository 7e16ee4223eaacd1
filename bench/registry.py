"""Every name the runner (bench/run.py) runs: the studies, the steps (GPU steps, perf benches, probes), the GPU
check's calls; and the retired records, whose pages the drawer still draws from their JSON."""

from __future__ import annotations

import importlib
import json
import sys
from functools import cache
from pathlib import Path

from bench.perf.gpu_check import CALLS, TOTAL_BUDGET_S  # noqa: F401  (the runner reads them)
from bench.perf.gpu_check import STEPS as GPU_STEPS
from bench.step import Context, Step

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def script(name: str, title: str, module: str, kind: str) -> Step:
    """A bench that takes its own arguments (`python -m bench.run NAME -- ARGS`) and writes what they say."""

    def measure(ctx: Context) -> None:
        saved, sys.argv = sys.argv, [f"python -m bench.run {name}", *ctx.argv]
        try:
            importlib.import_module(module).main()
        finally:
            sys.argv = saved
        ctx.part("run", status="ok", argv=" ".join(ctx.argv))

    return Step(name, title, measure, kind=kind)


STEPS: dict[str, Step] = {
    s.name: s
    for s in (
        *GPU_STEPS,
        script("gpu-pack", "The GPU check's data pack", "bench.perf.gpu_pack", "perf"),
        script("aligner-pack", "The GPU aligner's pack", "bench.perf.aligner_pack", "perf"),
        script("reliability", "Kill -9 and resume", "bench.perf.reliability", "perf"),
        script("compile-check", "Quickstart compiled against eager on CPU", "bench.perf.compile_check", "perf"),
        script("fuzz", "Readers fed mutated valid files", "bench.perf.fuzz", "perf"),
        script("gated-bias-step", "XLM-E's gated bias in a CPU training step", "bench.perf.gated_bias_step", "perf"),
        script("veco-translation", "VECO §3.2: translation fine-tuning", "bench.probes.veco_translation", "probe"),
        script("ernie-m-pseudo-tokens", "BTMLM pseudo-token precision", "bench.probes.ernie_m_pseudo_tokens", "probe"),
    )
}


def record_name(name: str) -> str:
    """The record's file name in --out: the GPU check's calls keep `gpu_check`, a step its own name."""
    return "gpu_check" if name in CALLS or STEPS[name].kind == "gpu" else name


@cache
def retired() -> dict[str, str]:
    """Records whose code left the tree: name -> where their page, JSON and code are."""
    found = {}
    for path in sorted(RESULTS.rglob("*.json")):
        text = path.read_text(encoding="utf-8")
        if '"retired"' in text and isinstance(saved := json.loads(text), dict) and "retired" in saved:
            code = saved["retired"]
            where = f"its code {code['module']} at commit {code['code']}" if code["module"] else "a note"
            name = path.relative_to(RESULTS).with_suffix("").as_posix()
            found[name] = f"page {path.with_suffix('.md').relative_to(RESULTS.parents[1])}; {where}"
    return found


def listing(study_steps: dict[str, list[str]]) -> str:
    """`python -m bench.run --list`: every study with its steps, every step by kind, the calls, the retired records."""
    lines = ["studies (python -m bench.run STUDY [STEP ...]):"]
    lines += [f"  {name}: {', '.join(steps)}" for name, steps in study_steps.items()]
    for kind, what in (("gpu", "GPU steps"), ("perf", "perf benches"), ("probe", "probes")):
        lines.append(f"{what}:")
        lines += [f"  {s.name}: {s.title}" for s in STEPS.values() if s.kind == kind]
    lines.append("the GPU check's calls:")
    lines += [f"  {name}: {', '.join(steps)}" for name, steps in CALLS.items()]
    lines.append("retired (python -m bench.run NAME --page draws the page again from its JSON):")
    lines += [f"  {name}: {where}" for name, where in retired().items()]
    return "\n".join(lines)
