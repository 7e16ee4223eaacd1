"""A run over two processes (torchrun, gloo) that fails ends politely: a rank killed with -9, a data-loader worker
killed with -9, a SIGTERM to the launcher, a full GPU. The survivors stop, each with one line naming what died,
the last complete checkpoint and the command that continues; no traceback from a polyalign process; the checkpoint
is intact, and the resume from it trains the uninterrupted run's losses exactly. Rank 0 speaks for the run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bench.perf.torchrun_processes import (
    LAUNCH,
    children,
    exit_codes,
    polyalign_tracebacks,
    rank_processes,
    resume_command,
    said_lines,
)
from polyalign.checkpoint import checkpoint_dirs, load_checkpoint_state
from polyalign.data.loader import StepLoader, dead_worker
from polyalign.finetune.loop import FinetuneConfig, memory_named
from polyalign.io import DataError
from polyalign.train import distributed
from polyalign.train.distributed import lost_peer, lost_worker, relaunch, speaker_prefix
from polyalign.train.guard import RunGuard
from tests import test_finetune_loop
from tests.conftest import losses, tiny_recipe_overrides

ROOT = Path(__file__).resolve().parents[1]
STEPS, SAVE_EVERY, KILL_AFTER = 12, 4, 6
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
tiny_model, tiny_pack = test_finetune_loop.tiny_model, test_finetune_loop.tiny_pack  # its session fixtures


def _args(run: Path, prepared: Path) -> list[str]:
    sets = [
        *tiny_recipe_overrides(prepared, STEPS),
        f"trainer.save_every={SAVE_EVERY}",
        "trainer.loader_workers=1",
        "trainer.process_timeout_s=20",
    ]
    return ["pretrain", "xlm", "--run-dir", str(run), "--no-progress", *[a for s in sets for a in ("--set", s)]]


def _launch(run: Path, prepared: Path, entry: tuple[str, ...] = ("-m", "polyalign.cli")) -> subprocess.Popen:
    return subprocess.Popen(
        [*LAUNCH, *entry, *_args(run, prepared)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _logged(run: Path) -> int:
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def _wait_for_steps(proc: subprocess.Popen, run: Path, steps: int) -> dict[int, int]:
    while proc.poll() is None and _logged(run) < steps:
        time.sleep(0.01)
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    return rank_processes(proc.pid)


def _finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=120)
    assert not polyalign_tracebacks(out), out[-4000:]
    return out


def _resume_is_exact(said: str, run: Path, straight: Path) -> None:
    """The line's command resumes from the checkpoint it names (its files load) and trains the same losses."""
    kept = checkpoint_dirs(run)[-1]
    assert f"kept: checkpoint {kept.name} (step {int(kept.name[5:])})" in said, said
    assert not list((run / "checkpoints").glob(".step-*")), "a half-written checkpoint was left"
    load_checkpoint_state(kept)
    resumed = subprocess.run(resume_command(said), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {kept} at step {int(kept.name[5:])}" in resumed.stdout
    [done] = said_lines(resumed.stdout + resumed.stderr)  # rank 0 alone says it
    assert done.startswith("done: "), done
    assert losses(run) == losses(straight)


@pytest.fixture(scope="module")
def straight(sample_prepared, tmp_path_factory) -> Path:
    """The uninterrupted run, launched as the interrupted ones are."""
    run = tmp_path_factory.mktemp("straight") / "run"
    out = _finish(_launch(run, sample_prepared))
    assert said_lines(out) and said_lines(out)[0].startswith("done: "), out[-3000:]
    assert len(said_lines(out)) == 1, out  # rank 0 alone says it
    return run


@pytest.mark.integration
def test_a_rank_killed_leaves_one_line_from_the_survivor_and_an_exact_resume(straight, sample_prepared, tmp_path):
    run = tmp_path / "run"
    proc = _launch(run, sample_prepared)
    os.kill(_wait_for_steps(proc, run, KILL_AFTER)[1], 9)
    out = _finish(proc)
    assert proc.returncode == 1 and exit_codes(out) == {0: 1, 1: -9}, out[-3000:]
    [said] = said_lines(out)
    assert said.startswith("error: after step ") and " rank 1 is gone (Connection " in said, said
    assert "stopped without saving; kept: checkpoint step-" in said, said
    _resume_is_exact(said, run, straight)


@pytest.mark.integration
def test_a_loader_worker_killed_is_named_by_its_rank_and_the_resume_is_exact(straight, sample_prepared, tmp_path):
    run = tmp_path / "run"
    proc = _launch(run, sample_prepared)
    [worker] = children(_wait_for_steps(proc, run, KILL_AFTER)[1])
    os.kill(worker, 9)
    out = _finish(proc)
    assert proc.returncode == 1 and exit_codes(out) == {0: 1, 1: 1}, out[-3000:]
    own, survivor = sorted(said_lines(out), key=lambda line: not line.startswith("rank 1: "))
    assert own.startswith("rank 1: error: after step "), out
    assert f"its data-loader worker (pid {worker}) was killed by signal Killed; kept: checkpoint step-" in own, own
    assert survivor.startswith("error: after step ") and "rank 1 is gone" in survivor, survivor
    _resume_is_exact(survivor, run, straight)


@pytest.mark.integration
def test_sigterm_to_the_launcher_stops_every_rank_at_one_step_with_one_message(straight, sample_prepared, tmp_path):
    run = tmp_path / "run"
    proc = _launch(run, sample_prepared)
    _wait_for_steps(proc, run, KILL_AFTER)
    proc.terminate()  # torchrun sends SIGTERM to every rank's process group
    out = _finish(proc)
    assert proc.returncode == 1, out[-3000:]  # torchrun's own code after a signal (its summary: a SignalException)
    [said] = said_lines(out)
    step = losses(run)[-1][0]  # the step both ranks stopped at: the checkpoint holds both ranks' data states there
    assert said.startswith(f"SIGTERM at step {step}: kept: checkpoint step-{step:07d} (step {step}); continue with `")
    assert checkpoint_dirs(run)[-1].name == f"step-{step:07d}"
    _resume_is_exact(said, run, straight)


@pytest.mark.integration
def test_a_full_gpu_names_the_batch_settings_to_lower_and_what_was_kept(straight, sample_prepared, tmp_path):
    run = tmp_path / "run"
    proc = _launch(run, sample_prepared, ("-m", "tests.faults", str(KILL_AFTER), "1"))
    out = _finish(proc)
    assert proc.returncode == 1 and exit_codes(out) == {0: 1, 1: 2}, out[-3000:]
    own, survivor = sorted(said_lines(out), key=lambda line: not line.startswith("rank 1: "))
    assert own.startswith(
        f"rank 1: error: after step {KILL_AFTER - 1}: the GPU ran out of memory with micro-batches "
        "of data.mono.max_tokens=512, data.parallel.max_tokens=512; kept: checkpoint step-0000004"
    ), own
    assert own.endswith("--set data.mono.max_tokens=256 --set data.parallel.max_tokens=256`"), own
    assert "rank 1 is gone" in survivor, survivor
    # the suggested command resumes; without its smaller batches (the fault was injected), exactly
    halved = resume_command(own)
    _resume_is_exact(
        own.replace(" --set data.mono.max_tokens=256 --set data.parallel.max_tokens=256", ""), run, straight
    )
    assert halved[-4:] == ["--set", "data.mono.max_tokens=256", "--set", "data.parallel.max_tokens=256"]


# ---------------------------------------------------------------------------------------------------------
# The pieces, without processes


GLOO_RESET = (
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:52423: Connection reset by "
    "peer. This is typically caused by a remote worker hanging or bugs in the application."
)


def test_the_backends_words_for_a_lost_peer_and_a_dead_worker_are_recognised():
    assert lost_peer(RuntimeError(GLOO_RESET)) == "Connection reset by peer"
    assert lost_peer(RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 20000ms for recv"))
    assert lost_peer(torch.distributed.DistBackendError("something the backend said")) == "something the backend said"
    assert lost_peer(torch.cuda.OutOfMemoryError("CUDA out of memory")) is None
    assert lost_peer(RuntimeError("shape mismatch")) is None and lost_peer(ValueError(GLOO_RESET)) is None
    killed = RuntimeError("DataLoader worker (pid 4242) is killed by signal: Killed. ")
    assert lost_worker(killed) == "its data-loader worker (pid 4242) was killed by signal Killed"
    gone = RuntimeError("DataLoader worker (pid(s) 17, 18) exited unexpectedly")
    assert lost_worker(gone) == "its data-loader worker (pid 17, 18) exited unexpectedly"
    assert lost_worker(RuntimeError(GLOO_RESET)) is None


def test_a_connection_broken_by_a_killed_loader_worker_is_told_as_the_workers_death():
    # On busy cores a killed worker's batch can fail as a reset connection before the loader sees the death.
    batches = iter(torch.utils.data.DataLoader(range(64), batch_size=2, num_workers=1))
    next(batches)
    assert dead_worker(batches._workers, wait_s=0.2) is None  # alive: the broken connection stays what it is
    handler = signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the loader's own would raise its report here
    try:
        [worker] = [w.pid for w in batches._workers]
        os.kill(worker, 9)
        told = dead_worker(batches._workers)
        assert lost_worker(told) == f"its data-loader worker (pid {worker}) was killed by signal Killed"
    finally:
        del batches
        signal.signal(signal.SIGCHLD, handler)


class _DeadWorkersItems:
    """A loader's iterator whose one worker was killed (kill -9) and which reports it as `error`."""

    def __init__(self, error: BaseException):
        self.error, self._workers = error, [SimpleNamespace(pid=4242, exitcode=-9)]

    def __next__(self):
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError(104, "Connection reset by peer"),
        RuntimeError("DataLoader worker (pid(s) 4242) exited unexpectedly"),
        EOFError(),
    ],  # fmt: skip
)
def test_the_step_loader_names_the_signal_that_killed_its_worker_however_the_loader_met_it(error):
    loader = object.__new__(StepLoader)
    loader.workers, loader.num_slots, loader._items = 1, 1, _DeadWorkersItems(error)
    with pytest.raises(RuntimeError) as told:
        next(loader)
    assert lost_worker(told.value) == "its data-loader worker (pid 4242) was killed by signal Killed"


def test_the_step_loader_lets_other_errors_through():
    loader = object.__new__(StepLoader)
    loader.workers, loader.num_slots, loader._items = 1, 1, _DeadWorkersItems(RuntimeError("shape mismatch"))
    with pytest.raises(RuntimeError, match="^shape mismatch$"):
        next(loader)


def test_rank_0_speaks_for_the_run_another_rank_only_of_itself(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert speaker_prefix() == ""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    assert speaker_prefix() is None  # before the group is joined, every process meets the same errors
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    assert speaker_prefix() == "rank 1: "


def test_the_command_that_continues_is_launched_as_the_run_was(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert relaunch("pretrain --resume --run-dir r") == "polyalign pretrain --resume --run-dir r"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert relaunch("x") == "torchrun --standalone --nproc_per_node 2 -m polyalign.cli x"
    monkeypatch.setenv("WORLD_SIZE", "16")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert relaunch("x") == "torchrun --nnodes 2 --nproc_per_node 8 -m polyalign.cli x"


def test_the_process_group_waits_for_a_peer_at_most_the_trainers_timeout(monkeypatch):
    joined = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kw: joined.append(kw))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 1)
    distributed.init_distributed(timeout_s=20)
    assert joined[0]["timeout"] == timedelta(seconds=20)


def test_a_signal_that_comes_during_the_vote_stops_every_process_after_the_next_step(monkeypatch):
    """SIGTERM reaches each rank whenever it reaches it, often while it waits in the stop vote's all-reduce: the
    vote (taken before) says no, and the signal must still count at the next one."""
    guard = RunGuard()
    run = SimpleNamespace(step=5, world=2, bookkeeping=None)
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda flag, **kw: guard._handle(signal.SIGTERM, None))
    assert not guard.stop_requested(run)  # the others asked nothing; this process's signal came meanwhile
    assert guard.stop_requested(run) and guard.signum == signal.SIGTERM


# ---------------------------------------------------------------------------------------------------------
# Fine-tuning: one process; a full GPU is one line


@pytest.mark.integration
def test_finetune_under_torchrun_is_refused_by_rank_0_alone(tiny_model, tiny_pack):
    common = ["--model", str(tiny_model), "--data", str(tiny_pack), "--max-train", "4", "--seeds", "1", "--no-progress"]
    proc = subprocess.run(
        [*LAUNCH, "-m", "polyalign.cli", "finetune", "pos", *common], cwd=ROOT, env=ENV, capture_output=True, text=True
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and exit_codes(out) == {0: 2, 1: 2}, out[-3000:]
    assert not polyalign_tracebacks(out), out
    [said] = said_lines(out)
    assert said.startswith("error: fine-tuning trains in one process, and this is process 0 of 2 (torchrun)"), said


def test_a_full_gpu_while_fine_tuning_names_the_batch_to_halve():
    task, config = SimpleNamespace(name="pos"), FinetuneConfig(batch_size=32, eval_batch_tokens=16384)
    where = {"step": 7, "setting": "batch_size"}
    with pytest.raises(DataError) as said, memory_named(task, 0, where, config):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert str(said.value) == (
        "pos seed 0, after step 7: the GPU ran out of memory with finetune.batch_size=32; nothing of this task is "
        "kept: run the command again with --set finetune.batch_size=16"
    )
    where["setting"] = "eval_batch_tokens"  # while scoring
    halve = r"finetune.eval_batch_tokens=16384; .* --set finetune.eval_batch_tokens=8192"
    with pytest.raises(DataError, match=halve), memory_named(task, 0, where, config):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")
