"""One prepared GPU check (issues 34, 46): every path polyalign runs on a GPU, how fast, and one paper claim above
CPU scale, in two commands that fit one 15-minute loan of the GPU machine.

THE PLAN (device seconds; the loan's 900 include the machine's start and every wait). Measured on the first loan
(one H200, 2026-11-26, bench/results/gpu/gpu_check.md): start and transfers ~30; call 1 179; call 2 489 with the
XLM-E arm cut at 1.9e16 FLOPs by a 3-minute guard (it ran at 105 model TFLOP/s, MLM + TLM at 225).
  start of the machine and transfers                                     ~30-120
  call 1 (timeout_s 260): environment, gpu tests, throughput             budgets 15 + 100 + 120 = 235
  call 2 (timeout_s 600, at once while warm): the evidence step          budget 590: probes ~40, MLM + TLM ~135,
                                                                         XLM-E ~290 (5-minute guard), measures ~110
  the 30 s idle before give_back                                         ~30
  total                                                                  ~890 of 900: call 1 is the one to cut
The commands (here first: `python bench/perf/gpu_pack.py`, then carry the pack and the wheels the image lacks):
  call 1: pip install --target /tmp/site .whl/*.whl; PYTHONPATH=/tmp/site POLYALIGN_COMMIT=<hash>
          timeout 250 python3 bench/perf/gpu_check.py --steps environment,gpu_tests,throughput --out /tmp/gc;
          tar czf $OUT/gpu_check.tgz -C /tmp/gc .; cp /tmp/gc/gpu_check.json $OUT/call1.json
  call 2: the same with --steps evidence, timeout 595, $OUT/call2.json (the image's typer needs the carried one)
  here:   python bench/perf/gpu_check.py --combine call1.json call2.json --out bench/results/gpu
          (then copy evidence/xlm-e-gpu.json to bench/results/evidence/sections/ and `python -m bench.page evidence`)
Steps 4 and 5 (alignment, Tatoeba speed) run when a loan has time left: `--steps alignment,tatoeba`.

Usage on the device machine: python3 bench/perf/gpu_check.py --out $OUT [--steps a,b]
Every step at tiny sizes on the CPU, to check the script itself (a few minutes; tests/test_gpu_check.py):
    .venv/bin/python bench/perf/gpu_check.py --dry-run --out /tmp/gpu_check
--out defaults to $OUT when set, else bench/results/gpu. Writes gpu_check.md, gpu_check.json and logs/ (every
command's output) there.

Steps, each in its own process with a wall-clock budget (a step that overruns is killed and recorded
as failed, with what it had measured so far, and the next one starts):
1. environment: GPU, memory, driver / CUDA / torch versions, bf16, SDPA's flash kernel.
2. gpu tests: `torchrun --nproc_per_node 1 -m polyalign.cli pretrain xlm` with trainer.distributed=ddp through a
   checkpoint, then `--resume`; a torchrun DDP probe on NCCL (gloo on CPU); `pytest -m gpu tests/test_gpu.py`.
3. throughput: an XLM-R-base-sized encoder (12 x 768, 12 heads, FFN 3072, vocabulary 250,002, sequences of 512,
   bf16 autocast), polyalign's MLM step against transformers' XLMRobertaForMaskedLM on the same batches with
   the same AdamW; then polyalign with activation checkpointing and with torch.compile. tokens/s, MFU against
   the card's dense bf16 peak, peak memory.
4. alignment: `polyalign align` (argmax, layer 8) on 20,000 sentence pairs against the same computation written
   plainly with transformers (SimAlign's way), and `polyalign evaluate alignment`, with multilingual-e5-small
   (models/multilingual-e5-small; else `polyalign import-e5`; else a randomly initialised model of its shape).
5. tatoeba: `polyalign evaluate tatoeba --langs tatoeba14 --layers all` with the same model, seconds.
6. evidence: the evidence study's section xlm-e-gpu (XLM-E vs MLM + TLM from scratch, 3e16 FLOPs per arm, 12 x 768)
   on the carried data pack, measured and judged by the evidence page's rule (bench/perf/gpu_evidence_step.py).
A step records `ok`, `skipped: <reason>` or `failed: <one line>`, and so does each of its parts.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.util
import itertools
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.perf.gpu_evidence_step import step_evidence  # noqa: E402

SHARED = ROOT.parent / "shared"
SAMPLE = ROOT / "polyalign" / "sample_data"
E5_FOLDER = ROOT / "models" / "multilingual-e5-small"
TOTAL_BUDGET_S = 595  # one call's steps; a call may run 10 minutes, the loan 15 in all (THE PLAN above)
NO_CUDA = "skipped: no CUDA"
UNFINISHED = "failed: unfinished at the step's deadline"  # a part's status while it runs: what stays if killed

# Dense bf16 peak, TFLOP/s, by the name torch reports (NVIDIA data sheets, without sparsity).
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 SXM", 989.0), ("H100 80GB HBM3", 989.0), ("H200", 989.0))
PEAK_BF16_TFLOPS += (("A100", 312.0),)


@dataclass(frozen=True)
class Sizes:
    """What a check runs at: the real sizes on a GPU, tiny ones for --dry-run on the CPU."""

    throughput_model: dict
    batch: int
    length: int
    warmup: int
    steps: int
    compile_backend: str
    pretrain_steps: int
    pairs: int
    align_model: dict  # the random stand-in's shape; vocab_size is the least it gets
    align_layer: int


FULL = Sizes(
    throughput_model=dict(vocab_size=250_002, hidden_size=768, num_layers=12, num_heads=12, ffn_size=3072),
    batch=16,
    length=512,
    warmup=5,  # the compiled arm compiles in its first two (the MLM head's masked count turns dynamic)
    steps=30,
    compile_backend="inductor",
    pretrain_steps=20,
    pairs=20_000,
    align_model=dict(vocab_size=250_037, hidden_size=384, num_layers=12, num_heads=12, ffn_size=1536),
    align_layer=8,
)
DRY = Sizes(
    throughput_model=dict(vocab_size=1000, hidden_size=32, num_layers=2, num_heads=4, ffn_size=64),
    batch=4,
    length=64,
    warmup=1,
    steps=1,
    compile_backend="eager",  # dynamo's tracing without inductor's code generation: seconds instead of minutes
    pretrain_steps=4,
    pairs=200,
    align_model=dict(vocab_size=0, hidden_size=32, num_layers=2, num_heads=4, ffn_size=64),
    align_layer=2,
)


# ---------------------------------------------------------------------------------------------------------
# One step's process: a result that is saved after every part, so that a step killed at its budget keeps what
# it measured.


class Step:
    def __init__(self, name: str, work: Path, logs: Path, deadline: float, dry_run: bool):
        self.name, self.work, self.logs, self.deadline, self.dry_run = name, work, logs, deadline, dry_run
        self.sizes = DRY if dry_run else FULL
        self.file = work / "steps" / f"{name}.json"
        self.result: dict = {"parts": {}, "notes": []}
        self.save()

    def left(self) -> float:
        return self.deadline - time.time()

    def part(self, part_name: str, /, **values) -> dict:
        """Record (or update) one part of the step: a status and its measurements (a measurement may be called
        `name`: the part's own name is positional only)."""
        self.result["parts"].setdefault(part_name, {}).update(values)
        self.save()
        return self.result["parts"][part_name]

    def note(self, text: str) -> None:
        self.result["notes"].append(text)
        self.save()

    def save(self) -> None:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, indent=2, default=str) + "\n")
        tmp.replace(self.file)

    def log(self, name: str) -> Path:
        return self.logs / f"{self.name}.{name}.log"


def one_line(text: str) -> str:
    """The last non-empty line of a command's output: what a person reads first when it failed."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:300]


def run_command(step: Step, name: str, command: list[str], stdout: Path | None = None, env: dict | None = None):
    """Run a command to completion within what is left of the step's budget; (status, seconds). Its output goes
    to logs/, stdout to `stdout` when given."""
    log = step.log(name)
    log.parent.mkdir(parents=True, exist_ok=True)
    if step.left() < 1:
        return "skipped: step budget spent", 0.0
    t0 = time.perf_counter()
    with open(log, "w") as err, open(stdout or os.devnull, "w") as out:
        err.write("$ " + " ".join(command) + "\n")
        err.flush()
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=out if stdout else err,
            stderr=err,
            env=child_env(env),
            start_new_session=True,  # apart from the step's group: a timeout ends the command, not the step
        )
        try:
            code = process.wait(timeout=step.left())
        except subprocess.TimeoutExpired:
            end_tree(process)
            return f"failed: timed out after {time.perf_counter() - t0:.0f} s (step budget)", time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    if code != 0:
        return f"failed: exit {code}: {one_line(log.read_text(errors='replace'))}", seconds
    return "ok", seconds


def child_env(extra: dict | None = None) -> dict:
    """The environment of every command: this checkout's polyalign first, installed or not."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


def end_tree(process: subprocess.Popen, grace: float = 3.0) -> None:
    """End a process and everything it started: torchrun starts its workers in sessions of their own, and a step
    its commands, so a process group is not enough. SIGTERM first (torchrun then stops its workers itself)."""
    tree = [process.pid, *descendants(process.pid)]  # before any dies: orphans lose their parent link
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    process.wait()


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # the field after the state
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def polyalign_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "polyalign.cli", *args]


def torchrun(*args: str) -> list[str]:
    """torchrun, one process: --standalone picks a free rendezvous port itself."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", *args]


def device_name(step: Step) -> str:
    import torch

    return "cuda" if torch.cuda.is_available() and not step.dry_run else "cpu"


# ---------------------------------------------------------------------------------------------------------
# 1. environment


def step_environment(step: Step) -> None:
    import torch

    versions = dict(torch=torch.__version__, python=platform.python_version(), transformers=_version("transformers"))
    step.part("versions", status="ok", **versions)
    if not torch.cuda.is_available():
        step.part("gpu", status=NO_CUDA, cpu_threads=torch.get_num_threads())
        return
    props = torch.cuda.get_device_properties(0)
    step.part(
        "gpu",
        status="ok",
        name=props.name,
        memory_gib=props.total_memory / 2**30,
        count=torch.cuda.device_count(),
        capability=f"{props.major}.{props.minor}",
        driver=_nvidia_smi("driver_version"),
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(),
        nccl=".".join(map(str, torch.cuda.nccl.version())) if torch.distributed.is_nccl_available() else "none",
        bf16=torch.cuda.is_bf16_supported(),
        peak_bf16_tflops=peak_bf16_tflops(props.name) or "unknown",
    )
    step.part("flash attention", **flash_attention())


def flash_attention() -> dict:
    """Whether SDPA's flash kernel runs here: a real call with only that kernel allowed."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(2, 12, 512, 64, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, q, q)
        torch.cuda.synchronize()
    except RuntimeError as e:
        return {"status": f"failed: {one_line(str(e))}", "enabled": torch.backends.cuda.flash_sdp_enabled()}
    return {"status": "ok", "enabled": torch.backends.cuda.flash_sdp_enabled()}


def peak_bf16_tflops(name: str) -> float | None:
    for key, tflops in PEAK_BF16_TFLOPS:
        if all(word in name for word in key.split()):
            return tflops
    return None


def _nvidia_smi(field: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True)
    except FileNotFoundError:
        return "unknown (no nvidia-smi)"
    return out.stdout.decode().strip().splitlines()[0] if out.returncode == 0 else "unknown"


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


# ---------------------------------------------------------------------------------------------------------
# 2. GPU tests, torchrun pre-training through a checkpoint and --resume, a DDP probe


def step_gpu_tests(step: Step) -> None:
    import torch

    if not torch.cuda.is_available() and not step.dry_run:
        step.part("all", status=NO_CUDA)
        return
    pretrain_part(step)
    ddp_probe_part(step)
    pytest_part(step)  # last: it takes what is left of the budget, the others have measured by then


def pytest_part(step: Step) -> None:
    """tests/test_gpu.py skips itself without CUDA: on the CPU (--dry-run) this checks the command runs."""
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/test_gpu.py", "-p", "no:cacheprovider"]
    status, seconds = run_command(step, "pytest", command)
    log = step.log("pytest")
    counts = re.findall(r"^=*\s*(\d+ \w+.*) in [\d.]+s", log.read_text(errors="replace"), re.M) if log.is_file() else []
    summary = counts[-1] if counts else "no summary line"
    if status == "ok" and "passed" not in summary:
        status = f"skipped: {summary}"  # every test skipped (no CUDA)
    step.part("pytest -m gpu", status=status, seconds=seconds, summary=summary)


def sample_prepared(step: Step) -> Path:
    """The bundled sample, prepared once per check (steps share it through the work folder)."""
    out = step.work / "prepared"
    if not (out / "meta.json").is_file():
        args = ["prepare", "--mono", str(SAMPLE / "mono"), "--parallel", str(SAMPLE / "parallel")]
        status, _ = run_command(step, "prepare", polyalign_cli(*args, "--out", str(out), "--vocab-size", "2000"))
        if status != "ok":
            raise RuntimeError(f"prepare: {status}")
    return out


def pretrain_part(step: Step) -> None:
    """xlm (MLM + TLM) under torchrun, stopped at a checkpoint halfway, then resumed to the end. With one process
    polyalign joins no process group (train.init_distributed: WORLD_SIZE > 1), so the probe checks NCCL."""
    n = step.sizes.pretrain_steps
    run = step.work / "pretrain-run"
    sets = [f"trainer.max_steps={n}", f"trainer.save_every={n // 2}", "trainer.log_every=1", "trainer.warmup_steps=1"]
    sets += ["trainer.distributed=ddp", "trainer.loader_workers=2"]
    if step.dry_run:
        sets += ["model.hidden_size=32", "model.num_layers=2", "model.num_heads=4", "model.ffn_size=64"]
        sets += ["data.mono.max_tokens=512", "data.parallel.max_tokens=512", "trainer.loader_workers=0"]
    try:
        prepared = sample_prepared(step)
    except RuntimeError as e:
        step.part("torchrun pretrain + resume", status=f"failed: {e}")
        return
    args = ["-m", "polyalign.cli", "pretrain", "xlm", "--data", str(prepared), "--run-dir", str(run), "--no-progress"]
    first = args + [x for s in [*sets, f"trainer.stop_at={n // 2}"] for x in ("--set", s)]
    status, seconds = run_command(step, "pretrain", torchrun(*first))
    part = step.part("torchrun pretrain + resume", status=status, first_seconds=seconds)
    if status != "ok":
        return
    resume = ["-m", "polyalign.cli", "pretrain", "--run-dir", str(run), "--resume", "--no-progress"]
    status, seconds = run_command(step, "resume", torchrun(*resume, "--set", "trainer.stop_at=0"))
    part.update(resume_seconds=seconds)
    if status == "ok":
        status = check_run(run, n)
    step.part("torchrun pretrain + resume", status=status, **run_numbers(run))


def check_run(run: Path, steps: int) -> str:
    """`ok` when the metrics log every step once, finite, and both checkpoints are there."""
    import math

    records = metrics(run)
    logged = [r["step"] for r in records]
    if logged != list(range(1, steps + 1)):
        return f"failed: logged steps {logged}, expected 1..{steps}"
    if not all(math.isfinite(r["loss"]) for r in records):
        return "failed: a loss is not finite"
    saved = sorted(p.name for p in (run / "checkpoints").iterdir())
    if saved != [f"step-{steps // 2:07d}", f"step-{steps:07d}"]:
        return f"failed: checkpoints {saved}"
    return "ok"


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def run_numbers(run: Path) -> dict:
    if not (run / "metrics.jsonl").is_file():
        return {}
    records = metrics(run)
    return {"steps": records[-1]["step"], "last_loss": records[-1]["loss"], "tokens_per_s": records[-1]["tokens_per_s"]}


def ddp_probe_part(step: Step) -> None:
    """torchrun, one process: the default backend (NCCL on CUDA, gloo without), DDP over a Linear, an all_reduce."""
    out = step.work / "ddp-probe.json"
    script = [str(Path(__file__).resolve()), "--ddp-probe", str(out)] + (["--dry-run"] if step.dry_run else [])
    status, seconds = run_command(step, "ddp-probe", torchrun(*script))
    found = json.loads(out.read_text()) if status == "ok" and out.is_file() else {}
    step.part("torchrun DDP probe", status=status, seconds=seconds, **found)


def ddp_probe(out: Path, dry_run: bool) -> None:
    """What a torchrun worker runs for the probe: backend chosen as polyalign chooses it."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and not dry_run
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend)
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 16).to(device))
    model(torch.randn(4, 16, device=device)).sum().backward()
    total = torch.ones(1, device=device)
    dist.all_reduce(total)
    out.write_text(json.dumps({"backend": dist.get_backend(), "world": dist.get_world_size(), "sum": total.item()}))
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------------------
# 3. training throughput: polyalign's MLM step against transformers' XLMRobertaForMaskedLM


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


# ---------------------------------------------------------------------------------------------------------
# 4. word alignment: polyalign against transformers written plainly, and AER on gold links


def step_alignment(step: Step) -> None:
    import torch

    if not torch.cuda.is_available() and not step.dry_run:
        step.part("all", status=NO_CUDA)
        return
    model = alignment_model(step)
    if model is None:
        return
    src, tgt, origin = write_pairs(step.work / "pairs", step.sizes.pairs)
    s = step.sizes
    step.note(
        f"{s.pairs:,} sentence pairs from {origin}; argmax (SimAlign), layer {s.align_layer}, bf16; pairs/s of whole "
        "commands, start-up and model loading included; links_f1 = agreement of the two sides' links"
    )
    device = device_name(step)
    ours = step.work / "polyalign.links"
    args = ["align", "--model", str(model), "--src", str(src), "--tgt", str(tgt), "--method", "argmax"]
    args += ["--layer", str(s.align_layer), "--device", device, "--no-progress"]
    status, seconds = run_command(step, "align", polyalign_cli(*args), stdout=ours)
    step.part("polyalign align", status=status, seconds=seconds, **rate(status, s.pairs, seconds))

    theirs = step.work / "transformers.links"
    hf = hf_folder(step, model)
    if hf is not None:
        command = [sys.executable, str(Path(__file__).resolve()), "--hf-align", str(hf), str(src), str(tgt)]
        command += [str(theirs), str(s.align_layer), device]
        status, seconds = run_command(step, "hf-align", command)
        step.part("transformers (SimAlign's way)", status=status, seconds=seconds, **rate(status, s.pairs, seconds))
        if ours.is_file() and theirs.is_file():
            step.part("transformers (SimAlign's way)", **link_agreement(ours, theirs))
    evaluate_alignment_part(step, model, device)


def rate(status: str, pairs: int, seconds: float) -> dict:
    """pairs/s of a whole command, start-up included; none for a command that did not finish."""
    return {"pairs_per_s": pairs / seconds} if status == "ok" else {}


def alignment_model(step: Step) -> Path | None:
    """The model steps 4 and 5 share, made once (its path and how it was found are kept in the work folder)."""
    record = step.work / "alignment-model.json"
    if record.is_file():
        found = json.loads(record.read_text())
        step.note(f"model: {found['description']}")
        return Path(found["path"])
    step.part("model", status=UNFINISHED)
    path, description = find_alignment_model(step)
    step.part("model", status="ok" if path else description, description=description)
    if path is None:
        return None
    record.write_text(json.dumps({"path": str(path), "description": description}))
    step.note(f"model: {description}")
    return path


def find_alignment_model(step: Step) -> tuple[Path | None, str]:
    if not step.dry_run and E5_FOLDER.is_dir():
        return E5_FOLDER, f"multilingual-e5-small ({E5_FOLDER.relative_to(ROOT)})"
    reason = "dry run"
    if not step.dry_run:
        out = step.work / "multilingual-e5-small"
        status, seconds = run_command(step, "import-e5", polyalign_cli("import-e5", "--out", str(out)))
        if status == "ok":
            return out, f"multilingual-e5-small (`polyalign import-e5`, {seconds:.0f} s; {E5_FOLDER.name} absent)"
        reason = f"{E5_FOLDER.relative_to(ROOT)} absent, import-e5 {status}"
    try:
        return random_model(step), f"randomly initialised, {shape(step.sizes.align_model)} ({reason})"
    except Exception as e:  # noqa: BLE001
        return None, f"failed: random model: {type(e).__name__}: {one_line(str(e))}"


def shape(m: dict) -> str:
    return f"{m['num_layers']} layers x {m['hidden_size']}, {m['num_heads']} heads, FFN {m['ffn_size']}"


def random_model(step: Step) -> Path:
    """A model folder of multilingual-e5-small's shape with random weights and an existing tokenizer (its ids
    all lie inside the vocabulary: the vocabulary is at least the tokenizer's)."""
    import torch

    from polyalign.checkpoint import save_model_folder
    from polyalign.model import EncoderConfig, MaskedLanguageModel
    from polyalign.tokenizer import load_tokenizer

    folder = SHARED / "models" / "small-base" / "tokenizer"
    tokenizer = load_tokenizer(folder if folder.is_dir() else sample_prepared(step) / "tokenizer")
    special = tokenizer.special
    m = dict(step.sizes.align_model)
    m["vocab_size"] = max(m["vocab_size"], special.vocab_size + 37)  # + 37: a model wider than its tokenizer
    config = EncoderConfig(**m, max_positions=128 if step.dry_run else 512, pad_token_id=special.pad)
    torch.manual_seed(0)
    out = step.work / "random-model"
    save_model_folder(out, MaskedLanguageModel(config), tokenizer, [], overwrite=True)
    return out


def hf_folder(step: Step, model: Path) -> Path | None:
    """The model as transformers loads it: a Hugging Face folder as it is, a polyalign folder exported."""
    config = json.loads((model / "config.json").read_text())
    if "polyalign" not in config:
        return model
    from polyalign.checkpoint import load_model
    from polyalign.model.hf import export_hf

    out = step.work / "hf-export"
    step.part("export_hf", status=UNFINISHED)
    t0 = time.perf_counter()
    try:
        export_hf(load_model(model), out)
    except Exception as e:  # noqa: BLE001
        step.part("export_hf", status=f"failed: {type(e).__name__}: {one_line(str(e))}")
        return None
    step.part("export_hf", status="ok", seconds=time.perf_counter() - t0)
    return out


def write_pairs(folder: Path, n: int) -> tuple[Path, Path, str]:
    """n sentence pairs (en-de, en-es, en-fr, en-ru in turn, repeated as needed) from ../shared/data/train when
    it is here, else from the bundled sample; words are the text split at spaces."""
    shared = SHARED / "data" / "train" / "parallel"
    langs = ("de", "es", "fr", "ru")
    if all((shared / f"en-{x}.{x}.gz").is_file() for x in langs):
        origin, read = shared, lambda p: gzip.open(f"{p}.gz", "rt", encoding="utf-8")
    else:
        origin, read = SAMPLE / "parallel", lambda p: open(p, encoding="utf-8")
    per_language = []
    for x in langs:
        with read(origin / f"en-{x}.{x}") as fx, read(origin / f"en-{x}.en") as fe:
            per_language.append(
                [(a.strip(), b.strip()) for a, b in itertools.islice(zip(fx, fe, strict=True), n // len(langs))]
            )
    interleaved = [p for group in itertools.zip_longest(*per_language) for p in group if p and p[0] and p[1]]
    pairs = list(itertools.islice(itertools.cycle(interleaved), n))
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = folder / "src.txt", folder / "tgt.txt"
    src.write_text("".join(a + "\n" for a, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(b + "\n" for _, b in pairs), encoding="utf-8")
    return src, tgt, shown(origin)


def shown(path: Path) -> str:
    """A path as a person at the repository root would type it."""
    return os.path.relpath(path, ROOT) if path.is_relative_to(ROOT.parent) else str(path)


def link_agreement(ours: Path, theirs: Path) -> dict:
    """How far the two computations agree: pairs with the same links, and F1 of one's links against the other's."""
    a = [set(line.split()) for line in ours.read_text().splitlines()]
    b = [set(line.split()) for line in theirs.read_text().splitlines()]
    if len(a) != len(b):
        return {"agreement": f"{len(a)} vs {len(b)} lines"}
    both = sum(len(x & y) for x, y in zip(a, b, strict=True))
    total = sum(len(x) + len(y) for x, y in zip(a, b, strict=True))
    same = sum(x == y for x, y in zip(a, b, strict=True))
    return {"same_links_pairs": same / max(len(a), 1), "links_f1": 2 * both / max(total, 1)}


def evaluate_alignment_part(step: Step, model: Path, device: str) -> None:
    shared = SHARED / "data" / "eval" / "word_alignment" / "de-en"
    gold = shared if shared.is_dir() and not step.dry_run else SAMPLE / "word_alignment" / "de-en"
    out = step.work / "evaluate-alignment"
    args = ["evaluate", "alignment", "--model", str(model), "--gold", str(gold), "--layers", "all"]
    status, seconds = run_command(
        step, "evaluate-alignment", polyalign_cli(*args, "--out", str(out), "--device", device, "--no-progress")
    )
    found = {}
    if status == "ok":
        r = json.loads((out / "alignment.json").read_text())
        found = {
            "gold": shown(gold),
            "sentences": r["sentences"],
            "layer": r["layer"],
            "aer": r["aer"],
        }
    step.part("polyalign evaluate alignment", status=status, seconds=seconds, **found)


def hf_align(folder: Path, src: Path, tgt: Path, out: Path, layer: int, device: str, batch_pairs: int = 64) -> None:
    """SimAlign's argmax with transformers, written plainly: a batch of pairs (both sides as rows, padded),
    hidden states at `layer`, then per pair cosine similarity of the subwords, argmax both ways, their
    intersection, and a word link wherever two of their subwords are linked."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from polyalign.align.words import pharaoh

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, dtype=torch.bfloat16).to(device).eval()
    pairs = list(
        zip(src.read_text(encoding="utf-8").splitlines(), tgt.read_text(encoding="utf-8").splitlines(), strict=True)
    )
    with open(out, "w", encoding="utf-8") as f, torch.inference_mode():
        for i in range(0, len(pairs), batch_pairs):
            chunk = [(a.split(), b.split()) for a, b in pairs[i : i + batch_pairs]]
            B = len(chunk)
            words = [a for a, _ in chunk] + [b for _, b in chunk]
            enc = tokenizer(words, is_split_into_words=True, padding=True, truncation=True, return_tensors="pt")
            hidden = model(**enc.to(device), output_hidden_states=True).hidden_states[layer].float()  # (2B, T, C)
            for b in range(B):
                f.write(pharaoh(simalign_argmax(hidden[b], hidden[B + b], enc.word_ids(b), enc.word_ids(B + b))) + "\n")


def simalign_argmax(source, target, source_words: list, target_words: list) -> list[tuple[int, int]]:
    import torch
    import torch.nn.functional as F

    s_pos = [k for k, w in enumerate(source_words) if w is not None]  # subwords, not <s> </s> <pad>
    t_pos = [k for k, w in enumerate(target_words) if w is not None]
    if not s_pos or not t_pos:
        return []
    sim = F.normalize(source[s_pos], dim=-1) @ F.normalize(target[t_pos], dim=-1).T  # (n, m)
    forward = torch.zeros_like(sim, dtype=torch.bool)
    forward[torch.arange(len(s_pos)), sim.argmax(1)] = True
    backward = torch.zeros_like(sim, dtype=torch.bool)
    backward[sim.argmax(0), torch.arange(len(t_pos))] = True
    linked = (forward & backward).nonzero().tolist()
    return sorted({(source_words[s_pos[i]], target_words[t_pos[j]]) for i, j in linked})


# ---------------------------------------------------------------------------------------------------------
# 5. Tatoeba-14 with a layer sweep


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


# ---------------------------------------------------------------------------------------------------------
# The check: every step in its own process, in order, each within its budget and the total's


STEPS = {  # name: (title, budget in seconds on the GPU, function)
    "environment": ("1. Environment", 15, step_environment),
    "gpu_tests": ("2. torchrun pretrain + resume, DDP probe, pytest -m gpu", 100, step_gpu_tests),
    "throughput": ("3. Training throughput (XLM-R base size)", 120, step_throughput),
    "alignment": ("4. Word alignment: polyalign vs transformers, AER", 110, step_alignment),
    "tatoeba": ("5. Tatoeba-14 with a layer sweep", 55, step_tatoeba),
    "evidence": ("6. Evidence above CPU scale: XLM-E vs MLM + TLM at 3e16 FLOPs", 590, step_evidence),
}
TABLE_STEPS = {"throughput"}  # steps whose parts are arms measured alike: a table; the others a list
DRY_BUDGET_S = 120  # per step on a busy 2-core CPU: the dry run's steps take seconds, a budget is a safety net
DRY_BUDGETS_S = {"evidence": 420}  # two tiny trainings and their measures through the CLI: minutes on 2 cores


def run_step(name: str, work: Path, logs: Path, dry_run: bool, budget: float) -> dict:
    """Run one step in a child process, killed at its budget; returns its record."""
    command = [sys.executable, str(Path(__file__).resolve()), "--step", name, "--work", str(work), "--logs", str(logs)]
    # The child stops its commands at its deadline and keeps a few seconds to save; then it is killed.
    command += ["--deadline", str(time.time() + budget - 5)] + (["--dry-run"] if dry_run else [])
    log = logs / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=child_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            code = None
            end_tree(process)
    seconds = time.perf_counter() - t0
    file = work / "steps" / f"{name}.json"
    record = json.loads(file.read_text()) if file.is_file() else {"parts": {}, "notes": []}
    record.update(name=name, title=STEPS[name][0], seconds=seconds, budget_s=budget)
    if code is None:
        record["status"] = f"failed: timed out after {seconds:.0f} s (budget {budget:.0f} s)"
    elif code != 0:
        record["status"] = f"failed: exit {code}: {one_line(log.read_text(errors='replace'))}"
    else:
        record["status"] = step_status(record["parts"])
    return record


def step_status(parts: dict) -> str:
    """A step is `ok` unless a part failed; skipped when every part was."""
    for name, part in parts.items():
        if part.get("status", "").startswith("failed"):
            return f"failed: {name}: {part['status'][len('failed: ') :]}"
    statuses = [p.get("status", "") for p in parts.values()]
    if statuses and all(s.startswith("skipped") for s in statuses):
        return statuses[0]
    return "ok" if statuses else "failed: recorded nothing"


def run_check(out: Path, dry_run: bool, steps: list[str] | None = None) -> dict:
    # Models, runs and data stay out of --out (the device tool brings back all of it); logs come back.
    with tempfile.TemporaryDirectory(prefix="gpu_check") as work:
        return check_in(Path(work), out, dry_run, steps or list(STEPS))


NOT_SELECTED = "skipped: not in --steps"


def check_in(work: Path, out: Path, dry_run: bool, selected: list[str]) -> dict:
    t0 = time.perf_counter()
    result = {
        "command": "bench/perf/gpu_check.py " + " ".join(sys.argv[1:]),
        "dry_run": dry_run,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": 0.0,
        "code": _commit(),
        "host": platform.node(),
        # Every step is named from the start: a check cut off from outside leaves a page that says where.
        "steps": [
            {"name": n, "title": t, "status": "failed: not reached", "parts": {}} for n, (t, _, _) in STEPS.items()
        ],
    }
    for i, (name, (title, budget, _)) in enumerate(STEPS.items()):
        left = TOTAL_BUDGET_S - (time.perf_counter() - t0)
        budget = DRY_BUDGETS_S.get(name, DRY_BUDGET_S) if dry_run else min(budget, left)
        if name not in selected:
            record = {"name": name, "title": title, "status": NOT_SELECTED, "parts": {}}
        elif budget < 5:
            record = {"name": name, "title": title, "status": "skipped: total budget spent", "parts": {}}
        else:
            record = run_step(name, work, out / "logs", dry_run, budget)
        result["steps"][i] = record
        result["seconds"] = time.perf_counter() - t0
        write_results(out, result)
        print(f"{title}: {record['status']} ({record.get('seconds', 0):.0f} s)", flush=True)
    return result


def combine(files: list[Path]) -> dict:
    """The checks of several calls as one: each step from the call that ran it (a later call wins), the calls'
    seconds added, their commands and dates listed."""
    calls = [json.loads(f.read_text()) for f in files]
    result = dict(calls[-1], seconds=sum(c["seconds"] for c in calls))
    result["command"] = " ; ".join(c["command"] for c in calls)
    result["date"] = " ; ".join(c["date"] for c in calls)
    steps = {s["name"]: s for s in calls[0]["steps"]}
    for call in calls[1:]:
        steps |= {s["name"]: s for s in call["steps"] if s["status"] != NOT_SELECTED}
    result["steps"] = list(steps.values())
    return result


def write_results(out: Path, result: dict) -> None:
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / "gpu_check.md").write_text(page(result))


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    return (out.stdout.strip() or "unknown") + (" + uncommitted changes" if dirty.stdout.strip() else "")


# ---------------------------------------------------------------------------------------------------------
# The page: one table per step, a row per part, a column per measurement


def page(r: dict) -> str:
    lines = [
        "# GPU check" + (" (dry run: CPU, tiny sizes; not a measurement)" if r["dry_run"] else ""),
        "",
        f"`{r['command']}` at {r['code']}, {r['date']} on {r['host']}, {r['seconds']:.0f} s in all.",
        "",
        "| step | status | seconds | budget |",
        "|---|---|---:|---:|",
    ]
    lines += [
        f"| {s['title']} | {s['status']} | {s.get('seconds', 0):.0f} | {s.get('budget_s', 0):.0f} |" for s in r["steps"]
    ]
    for s in r["steps"]:
        lines += ["", f"## {s['title']}: {s['status']}", ""]
        lines += [f"{note}." if not note.endswith(".") else note for note in s.get("notes", [])]
        if s.get("notes"):
            lines.append("")
        lines += part_table(s["parts"]) if s["name"] in TABLE_STEPS else part_list(s["parts"])
    return "\n".join(lines) + "\n"


def part_list(parts: dict) -> list[str]:
    """A line per part: its status, then its measurements."""
    return [
        f"- **{name}**: {p.get('status', '')}" + "".join(f"; {k} {cell(v)}" for k, v in p.items() if k != "status")
        for name, p in parts.items()
    ]


def part_table(parts: dict) -> list[str]:
    """A row per part (arms measured alike), a column per measurement."""
    columns = ["status", *dict.fromkeys(k for p in parts.values() for k in p if k != "status")]
    lines = ["| part | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * (len(columns) - 1)]
    lines += [f"| {name} | " + " | ".join(cell(p.get(k, "")) for k in columns) + " |" for name, p in parts.items()]
    return lines


def cell(value) -> str:
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value).replace("|", "/")
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


# ---------------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_out = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "bench" / "results" / "gpu"
    ap.add_argument("--out", type=Path, default=default_out, help="folder for gpu_check.md, .json and logs/")
    ap.add_argument("--dry-run", action="store_true", help="every step on the CPU at tiny sizes (< 1 minute)")
    ap.add_argument("--steps", help=f"comma list of steps to run (default all: {','.join(STEPS)})")
    ap.add_argument("--combine", nargs="+", type=Path, help="gpu_check.json files of several calls -> one page")
    ap.add_argument("--step", choices=list(STEPS), help=argparse.SUPPRESS)  # a step's own process
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--logs", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--ddp-probe", type=Path, help=argparse.SUPPRESS)  # a torchrun worker of the probe
    ap.add_argument("--hf-align", nargs=6, help=argparse.SUPPRESS)  # the transformers side of step 4
    args = ap.parse_args()
    if args.step:
        STEPS[args.step][2](Step(args.step, args.work, args.logs, args.deadline, args.dry_run))
    elif args.ddp_probe:
        ddp_probe(args.ddp_probe, args.dry_run)
    elif args.hf_align:
        folder, src, tgt, out, layer, device = args.hf_align
        hf_align(Path(folder), Path(src), Path(tgt), Path(out), int(layer), device)
    elif args.combine:
        args.out.mkdir(parents=True, exist_ok=True)
        write_results(args.out, combine(args.combine))
        print(f"wrote {args.out / 'gpu_check.md'} and gpu_check.json")
    else:
        steps = args.steps.split(",") if args.steps else list(STEPS)
        if unknown := [s for s in steps if s not in STEPS]:
            ap.error(f"--steps: unknown {', '.join(unknown)}; the steps are {', '.join(STEPS)}")
        args.out.mkdir(parents=True, exist_ok=True)
        run_check(args.out, args.dry_run, steps)
        print(f"wrote {args.out / 'gpu_check.md'} and gpu_check.json")


if __name__ == "__main__":
    main()
