"""What multi-process training needs beyond one process: collectives on the training device, stop decisions
taken by all processes together, and resuming with another processes x accumulation layout."""

from __future__ import annotations

import shutil
import socket
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from polyalign.checkpoint import checkpoint_dirs, load_model
from polyalign.config import load_recipe
from polyalign.io import DataError, Stopped
from polyalign.train import (
    Window,
    agree_on_stop,
    bookkeeping_group,
    build_run,
    distributed,
    load_run_recipe,
    loop,
    pretrain,
    reduce_window,
)
from tests.conftest import exact_recipe_overrides, losses, metrics, tiny_recipe_overrides


def norms(run: Path) -> list[float]:
    return [r["grad_norm"] for r in metrics(run)]


def exact_overrides(prepared: Path, steps: int) -> list[str]:
    """One process x 2 accumulation and 2 processes x 1 then compute the same losses."""
    return exact_recipe_overrides(prepared, steps) + ["trainer.save_every=100", "trainer.loader_workers=0"]


def test_step_collectives_take_tensors_on_the_training_device(monkeypatch):
    """NCCL takes GPU tensors only. The meta device stands in for the GPU: a sum built on the CPU (as a
    `torch.tensor([...])` of Python numbers) would show up here as a CPU tensor, or fail to convert."""
    seen = []
    monkeypatch.setattr(distributed.dist, "all_reduce", lambda tensor, *a, **k: seen.append(tensor.device))
    device = torch.device("meta")
    window = Window(device)
    for _ in range(2):
        value = torch.zeros((), device=device)
        window.add_micro_batch(value, {"mlm/accuracy": value}, flops=1.0, share=0.5)
        window.end_step(tokens=7, names=["mlm/accuracy"])
    assert reduce_window(window, world=2).device == device
    assert agree_on_stop(5, device, world=2).device == device
    assert seen == [device, device]


def test_a_named_device_wins_over_the_gpu_in_one_process(monkeypatch):
    """fit-aligner --device cpu on a GPU machine trains on the CPU: one process takes the device it is given."""
    monkeypatch.setattr(distributed.torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert distributed.init_distributed("cpu") == (0, 1, torch.device("cpu"))


def test_cpu_bookkeeping_gets_a_gloo_group_beside_nccl(monkeypatch):
    made = []
    monkeypatch.setattr(distributed.dist, "get_backend", lambda *a: "nccl")
    monkeypatch.setattr(distributed.dist, "new_group", lambda **kw: made.append(kw) or "gloo group")
    assert bookkeeping_group(world=2) == "gloo group" and made == [{"backend": "gloo"}]
    monkeypatch.setattr(distributed.dist, "get_backend", lambda *a: "gloo")
    assert bookkeeping_group(world=2) is None  # gloo takes CPU tensors itself


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_process(
    rank: int, world: int, port: int, overrides: list[list[str]], run_dir: str, resume: bool, warmup_signal: int
) -> None:
    import os
    import signal

    import torch.distributed as dist

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    step = loop.train_step

    def signalled(run, item):  # SIGTERM to the last process after head warm-up step `warmup_signal`
        step(run, item)
        if not run.counted and run.step == warmup_signal and rank == world - 1:
            os.kill(os.getpid(), signal.SIGTERM)

    loop.train_step = signalled
    try:
        recipe = load_run_recipe(run_dir, overrides[rank]) if resume else load_recipe("xlm", overrides[rank])
        pretrain(recipe, run_dir, resume=resume, progress=False)
    except Stopped:
        assert warmup_signal, "stopped by a signal nobody sent"
    finally:
        dist.destroy_process_group()


def train_two_processes(
    overrides: list[list[str]], run_dir: Path, resume: bool = False, warmup_signal: int = 0
) -> None:
    """`warmup_signal` > 0: the processes are told to stop (SIGTERM, to one of them) after that head warm-up step."""
    context = mp.start_processes(
        _train_process,
        args=(2, _free_port(), overrides, str(run_dir), resume, warmup_signal),
        nprocs=2,
        join=False,
        start_method="spawn",
    )
    for _ in range(480):  # a process left waiting for the other would hang: fail instead
        if context.join(timeout=1):
            break
    else:
        for p in context.processes:
            p.kill()
        pytest.fail("the processes did not finish together: one waits for the other")


@pytest.fixture(scope="module")
def two_process_run(sample_prepared, tmp_path_factory) -> Path:
    """2 gloo processes x 1 accumulation step; rank 1 alone is told to stop at step 2, rank 0 would go on to 4."""
    run_dir = tmp_path_factory.mktemp("ddp") / "run"
    base = exact_overrides(sample_prepared, steps=4)
    train_two_processes([base, base + ["trainer.stop_at=2"]], run_dir)
    return run_dir


@pytest.fixture(scope="module")
def fsdp_run(sample_prepared, tmp_path_factory) -> Path:
    """The same 2-process run to step 2, sharded with FSDP."""
    run_dir = tmp_path_factory.mktemp("fsdp") / "run"
    base = exact_overrides(sample_prepared, steps=4) + ["trainer.stop_at=2", "trainer.distributed=fsdp"]
    train_two_processes([base, base], run_dir)
    return run_dir


@pytest.mark.integration
def test_processes_that_disagree_on_stopping_stop_together(two_process_run):
    assert [p.name for p in checkpoint_dirs(two_process_run)] == ["step-0000002"]
    assert [s for s, _ in losses(two_process_run)] == [1, 2]


@pytest.mark.integration
def test_resume_two_processes_into_one_process_with_accumulation(two_process_run, sample_prepared, tmp_path):
    overrides = exact_overrides(sample_prepared, steps=4)
    pretrain(load_recipe("xlm", [*overrides, "trainer.grad_accumulation=2"]), tmp_path / "single", progress=False)
    resumed = load_run_recipe(two_process_run, ["trainer.grad_accumulation=2", "trainer.stop_at=0"])
    pretrain(resumed, two_process_run, resume=True, progress=False)
    a, b = losses(two_process_run), losses(tmp_path / "single")
    assert [s for s, _ in a] == [1, 2, 3, 4]
    for (_, x), (_, y) in zip(a, b, strict=True):
        assert x == pytest.approx(y, rel=1e-4)  # same data per slot; only float reduction order differs


@pytest.mark.integration
def test_fsdp_trains_and_saves_what_ddp_does(fsdp_run, two_process_run):
    """Same losses (gradients reduced over both processes, the optimizer updating the sharded parameters), and a
    checkpoint of full tensors that one process loads: weights, objectives and optimizer moments as DDP's."""
    ddp = [(s, loss) for s, loss in losses(two_process_run) if s <= 2]  # another test resumes that run to step 4
    sharded = losses(fsdp_run)
    assert [s for s, _ in sharded] == [1, 2]
    for (_, x), (_, y) in zip(sharded, ddp, strict=True):
        assert x == pytest.approx(y, rel=1e-4)
    assert norms(fsdp_run) == pytest.approx(norms(two_process_run)[:2], rel=1e-4)  # clipped over all the shards
    a, b = fsdp_run / "checkpoints" / "step-0000002", two_process_run / "checkpoints" / "step-0000002"
    model_a, model_b = load_model(a).model.state_dict(), load_model(b).model.state_dict()
    assert model_a.keys() == model_b.keys()
    for k in model_a:
        torch.testing.assert_close(model_a[k], model_b[k], rtol=1e-4, atol=1e-5)
    for name in ("objectives.safetensors", "trainer_state.safetensors"):
        x, y = load_file(a / name), load_file(b / name)
        assert x.keys() == y.keys()
        for k in x:
            if not k.startswith("rank"):  # RNG states
                torch.testing.assert_close(x[k], y[k], rtol=1e-4, atol=1e-5)


@pytest.mark.integration
def test_fsdp_resumes_the_same_curve(fsdp_run, sample_prepared, tmp_path):
    """A sharded run resumed sharded (full tensors scattered back into shards) continues the one-process curve."""
    overrides = exact_overrides(sample_prepared, steps=4)
    pretrain(load_recipe("xlm", [*overrides, "trainer.grad_accumulation=2"]), tmp_path / "single", progress=False)
    run_dir = tmp_path / "resumed"
    shutil.copytree(fsdp_run, run_dir)
    train_two_processes([["trainer.stop_at=0"]] * 2, run_dir, resume=True)
    a, b = losses(run_dir), losses(tmp_path / "single")
    assert [s for s, _ in a] == [1, 2, 3, 4]
    for (_, x), (_, y) in zip(a, b, strict=True):
        assert x == pytest.approx(y, rel=1e-4)


def test_fsdp_refuses_objectives_it_cannot_shard(sample_prepared, tmp_path):
    recipe = load_recipe("ppa", [*tiny_recipe_overrides(sample_prepared), "trainer.distributed=fsdp"])
    with pytest.raises(DataError, match=r"^trainer.distributed=fsdp: objectives.\d \(moco\) updates .*; use trainer"):
        build_run(recipe, tmp_path / "run")
