"""A run stopped before its budget keeps its work and says how to go on: SIGINT and SIGTERM save the step they
arrived in, a NaN loss or a full disk names the checkpoint kept and the command that continues, exactly; two
runs started together on one folder: one trains, the other is refused."""

from __future__ import annotations

import errno
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors import SafetensorError

from polyalign.checkpoint import checkpoint_dirs
from polyalign.cli import main
from tests.conftest import losses, metrics, tiny_recipe_overrides

ROOT = Path(__file__).resolve().parents[1]
STEPS = 40


def _sets(prepared: Path, steps: int, *extra: str) -> list[str]:
    return [a for o in [*tiny_recipe_overrides(prepared, steps), *extra] for a in ("--set", o)]


def _start(run: Path, prepared: Path, steps: int = STEPS, *extra: str) -> subprocess.Popen:
    """`polyalign pretrain mlm` in a new process group (as a terminal's Ctrl-C reaches every process of it)."""
    args = ["pretrain", "mlm", "--run-dir", str(run), "--no-progress", *_sets(prepared, steps, *extra)]
    return subprocess.Popen(
        [sys.executable, "-m", "polyalign.cli", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _cli(args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    return exit_info.value.code, " ".join(capsys.readouterr().err.split())


def _command(said: str, lr: str | None = None) -> list[str]:
    """The command a one-line message gives (`polyalign ...`), with trainer.lr set to `lr` where it sets one."""
    command = shlex.split(re.search(r"`polyalign (pretrain [^`]*)`", said)[1])
    if lr is not None:
        command = [f"trainer.lr={lr}" if a.startswith("trainer.lr=") else a for a in command]
    return [*command, "--no-progress"]


def _continue(said: str, capsys, lr: str | None = None) -> int:
    return _cli(_command(said, lr), capsys)[0]


@pytest.fixture(scope="module")
def straight(sample_prepared, tmp_path_factory) -> Path:
    """The uninterrupted run, in its own process as the interrupted ones are."""
    run = tmp_path_factory.mktemp("straight") / "run"
    proc = _start(run, sample_prepared, STEPS, "trainer.save_every=100")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    return run


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_the_step_it_came_in_and_the_resume_is_exact(sig, straight, sample_prepared, tmp_path, capsys):
    run = tmp_path / "run"
    proc = _start(run, sample_prepared, STEPS, "trainer.save_every=100")
    metrics = run / "metrics.jsonl"
    while proc.poll() is None and (not metrics.is_file() or len(metrics.read_text().splitlines()) < 3):
        time.sleep(0.05)
    os.killpg(proc.pid, sig)  # the whole group: the loader's workers get it too, as with Ctrl-C
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, err[-2000:]
    said = err.strip().splitlines()[-1]
    step = losses(run)[-1][0]  # the last step trained, logged every step
    assert 3 <= step < STEPS
    assert said.startswith(f"{sig.name} at step {step}: kept: checkpoint step-{step:07d} (step {step}); continue with")
    assert [p.name for p in checkpoint_dirs(run)] == [f"step-{step:07d}"]  # no save was due before: this one is it
    assert "Traceback" not in err
    # in a process of its own, as the straight run: the same threads, so the same float sums
    resumed = subprocess.run(
        [sys.executable, "-m", "polyalign.cli", *_command(said)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming from {run / 'checkpoints' / f'step-{step:07d}'} at step {step}" in resumed.stdout
    assert losses(run) == losses(straight)


@pytest.mark.integration
def test_two_runs_started_together_on_one_folder_one_trains_the_other_is_refused(sample_prepared, tmp_path):
    run = tmp_path / "run"
    procs = [_start(run, sample_prepared, 12) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read().strip()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert len(refused.splitlines()) == 1 and "Traceback" not in refused, refused
    assert "trains in this folder" in refused or "a run already exists here" in refused, refused
    assert [s for s, _ in losses(run)] == list(range(1, 13))  # one run's lines, each step once


@pytest.mark.integration
def test_a_nan_loss_before_the_first_checkpoint_leaves_no_folder_to_block_the_fixed_command(
    sample_prepared, tmp_path, capsys
):
    run = tmp_path / "run"
    sets = _sets(sample_prepared, 4, "trainer.lr=1e30", "trainer.save_every=100")
    code, said = _cli(["pretrain", "mlm", "--run-dir", str(run), "--no-progress", *sets], capsys)
    assert code == 2 and said.startswith("error: step 2: loss is nan; lower trainer.lr"), said
    assert f"no checkpoint was written, so {run} was removed: run the command again with --set trainer.lr=1e+29" in said
    assert not run.exists()
    fixed = [a if a != "trainer.lr=1e30" else "trainer.lr=1e-3" for a in sets]
    assert _cli(["pretrain", "mlm", "--run-dir", str(run), "--no-progress", *fixed], capsys)[0] == 0
    assert losses(run)[-1][0] == 4


@pytest.mark.integration
def test_a_nan_loss_after_a_checkpoint_names_it_and_the_resume_with_a_lower_lr_uses_it(
    sample_prepared, tmp_path, capsys, monkeypatch
):
    from polyalign.train.metrics import Window

    real_add = Window.add_micro_batch
    steps_seen = []

    def nan_at_step_3(self, loss, *args):  # the loss the loop reads at step 3 is NaN; the weights stay clean
        steps_seen.append(1)
        return real_add(self, loss * float("nan") if len(steps_seen) == 3 else loss, *args)

    monkeypatch.setattr(Window, "add_micro_batch", nan_at_step_3)
    run = tmp_path / "run"
    sets = _sets(sample_prepared, 4, "trainer.save_every=1")
    code, said = _cli(["pretrain", "mlm", "--run-dir", str(run), "--no-progress", *sets], capsys)
    assert code == 2 and said.startswith("error: step 3: loss is nan; lower trainer.lr"), said
    kept = "kept: checkpoint step-0000002 (step 2); continue with "
    assert f"{kept}`polyalign pretrain --resume --run-dir {run} --set trainer.lr=0.0001`" in said, said
    monkeypatch.setattr(Window, "add_micro_batch", real_add)
    # the first resumed step already runs at the new peak: the rate restored is the recipe's, not the one saved
    from polyalign.train import build_run, load_run_recipe, restore_run

    resumed, _ = build_run(load_run_recipe(run, ["trainer.lr=0.0001"]), run, fresh=False)
    restore_run(resumed, checkpoint_dirs(run)[-1])
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(1e-4 * resumed.scheduler.lr_lambdas[0](2))
    assert _continue(said, capsys) == 0
    rates = {r["step"]: r["lr"] for r in metrics(run)}
    # trainer.lr 1e-3 up to the checkpoint, 1e-4 after it: the resume's --set is the schedule's new peak
    assert sorted(rates) == [1, 2, 3, 4] and rates[2] > 1e-4 and 0 < rates[3] <= 1e-4


@pytest.mark.integration
@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        SafetensorError(
            'Error while serializing: IoError(Os { code: 27, kind: FileTooLarge, message: "File too large" })'
        ),
    ],
    ids=["ENOSPC", "safetensors"],
)
def test_a_full_disk_while_checkpointing_keeps_the_last_checkpoint_and_resumes_exactly(
    failure, sample_prepared, tmp_path, capsys, monkeypatch
):
    import polyalign.checkpoint as checkpoint

    sets = _sets(sample_prepared, 6, "trainer.save_every=2")
    assert _cli(["pretrain", "mlm", "--run-dir", str(tmp_path / "straight"), "--no-progress", *sets], capsys)[0] == 0
    real_save_file, calls = checkpoint.save_file, []

    def disk_full_at_the_second_checkpoint(tensors, filename, *args, **kwargs):
        calls.append(filename)
        if len(calls) == 2:
            raise failure
        return real_save_file(tensors, filename, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save_file", disk_full_at_the_second_checkpoint)
    run = tmp_path / "run"
    code, said = _cli(["pretrain", "mlm", "--run-dir", str(run), "--no-progress", *sets], capsys)
    assert code == 2 and said.startswith("error: step 4: cannot write "), said
    assert (
        f"; kept: checkpoint step-0000002 (step 2); continue with `polyalign pretrain --resume --run-dir {run}`" in said
    )
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-0000002"]  # no half-written folder left
    monkeypatch.setattr(checkpoint, "save_file", real_save_file)  # space freed
    assert _continue(said, capsys) == 0
    assert losses(run) == losses(tmp_path / "straight")
