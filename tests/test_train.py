import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from polyalign.checkpoint import checkpoint_dirs, load_model
from polyalign.config import load_recipe
from polyalign.io import DataError
from polyalign.train import drop_held_gradients, learning_rate_factor, load_run_recipe, parameter_groups, pretrain
from tests.conftest import exact_recipe_overrides, losses, tiny_recipe_overrides

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration
def test_resume_continues_the_same_loss_curve(sample_prepared, tmp_path):
    overrides = tiny_recipe_overrides(sample_prepared, steps=6) + ["trainer.save_every=100", "model.dropout=0.1"]
    pretrain(load_recipe("xlm", overrides), tmp_path / "straight", progress=False)
    pretrain(load_recipe("xlm", overrides + ["trainer.stop_at=3"]), tmp_path / "paused", progress=False)
    assert [p.name for p in checkpoint_dirs(tmp_path / "paused")] == ["step-0000003"]
    pretrain(
        load_run_recipe(tmp_path / "paused", ["trainer.stop_at=0"]), tmp_path / "paused", resume=True, progress=False
    )
    straight, resumed = losses(tmp_path / "straight"), losses(tmp_path / "paused")
    assert [s for s, _ in resumed] == [1, 2, 3, 4, 5, 6]
    assert resumed == straight  # exactly: weights, optimizer, schedule, data position and RNG all restored


@pytest.mark.integration
def test_loss_falls_and_checkpoint_is_a_loadable_model_folder(sample_prepared, tmp_path):
    overrides = tiny_recipe_overrides(sample_prepared, steps=40) + ["trainer.lr=3e-3", "trainer.log_every=10"]
    pretrain(load_recipe("mlm", overrides), tmp_path / "run", progress=False)
    curve = losses(tmp_path / "run")
    assert curve[-1][1] < curve[0][1] - 0.5
    loaded = load_model(tmp_path / "run")
    assert loaded.model.config.hidden_size == 32 and loaded.tokenizer.special.vocab_size == 2000
    for f in (
        "model.safetensors",
        "objectives.safetensors",
        "trainer_state.safetensors",
        "trainer_state.json",
        "config.json",
        "tokenizer/sentencepiece.model",
    ):
        assert (tmp_path / "run" / "checkpoints" / "step-0000040" / f).is_file()


@pytest.mark.integration
def test_run_folder_is_never_overwritten_and_missing_files_are_reported(sample_prepared, tmp_path):
    overrides = tiny_recipe_overrides(sample_prepared, steps=2)
    pretrain(load_recipe("mlm", overrides), tmp_path / "run", progress=False)
    with pytest.raises(DataError, match="a run already exists here"):
        pretrain(load_recipe("mlm", overrides), tmp_path / "run", progress=False)
    ckpt = checkpoint_dirs(tmp_path / "run")[-1]
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(DataError, match=r"model\.safetensors: weights file missing"):
        load_model(ckpt)


def test_learning_rate_schedule_warms_up_then_decays():
    from polyalign.config import TrainerConfig

    cfg = TrainerConfig(max_steps=10, warmup_steps=2)
    assert [round(learning_rate_factor(s, cfg), 3) for s in range(10)] == [
        0.5,
        1.0,
        1.0,
        0.875,
        0.75,
        0.625,
        0.5,
        0.375,
        0.25,
        0.125,
    ]


def test_released_parameters_warm_up_again_from_their_release_step():
    from polyalign.config import TrainerConfig

    cfg = TrainerConfig(max_steps=20, warmup_steps=4, train_only=["cross"], train_only_until=8)
    trained = [learning_rate_factor(s, cfg) for s in range(20)]
    released = [learning_rate_factor(s, cfg, held=True) for s in range(20)]
    assert released[:8] == [0.0] * 8  # held
    # VECO §4 releases the whole model at step 8: its learning rate ramps up over warmup_steps again, to the
    # schedule every other parameter follows, then decays with it.
    assert released[8:12] == pytest.approx([trained[s] * (s - 7) / 4 for s in range(8, 12)])
    assert released[8] < 0.3 * trained[8] and released[12:] == trained[12:]


def test_held_parameters_get_no_optimizer_moments_until_released():
    from polyalign.config import TrainerConfig

    cfg = TrainerConfig(max_steps=10, warmup_steps=2, train_only=["cross"], train_only_until=3)
    torch.manual_seed(0)
    module = torch.nn.ModuleDict({"cross": torch.nn.Linear(4, 4), "self": torch.nn.Linear(4, 4)})
    groups = parameter_groups(module, cfg)
    optimizer = torch.optim.AdamW(groups, lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, [lambda s, h=g["held"]: learning_rate_factor(s, cfg, h) for g in groups]
    )
    held = list(module["self"].parameters())
    frozen = [p.detach().clone() for p in held]
    for step in range(5):
        module["self"](module["cross"](torch.randn(8, 4))).pow(2).mean().backward()
        drop_held_gradients(optimizer, step, cfg)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step < 3:  # held: no moments at all, and the weights (no decay either) untouched
            assert all(p not in optimizer.state for p in held)
            assert all(torch.equal(p, f) for p, f in zip(held, frozen, strict=True))
            assert all("exp_avg" in optimizer.state[p] for p in module["cross"].parameters())
    # released at step 3: the moments start then (AdamW's step count 2, not 5), and the weights move
    assert all(int(optimizer.state[p]["step"]) == 2 for p in held)
    assert not torch.equal(held[0], frozen[0])


def test_bad_recipe_values_name_the_key():
    with pytest.raises(DataError, match=r"trainer.max_step: unknown key; known: max_steps"):
        load_recipe("mlm", ["trainer.max_step=3"])
    with pytest.raises(DataError, match="recipe 'nope' not found"):
        load_recipe("nope")


def _run_cli(args: list[str], env_extra: dict | None = None, nproc: int = 1) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}
    prefix = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
        if nproc > 1
        else [sys.executable]
    )
    return subprocess.run(
        [*prefix, "-m", "polyalign.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.integration
def test_ddp_two_gloo_processes_match_one_process_with_accumulation(sample_prepared, tmp_path):
    overrides = exact_recipe_overrides(sample_prepared, steps=4)
    sets = [a for o in overrides for a in ("--set", o)]
    ddp = _run_cli(["pretrain", "xlm", "--run-dir", str(tmp_path / "ddp"), "--no-progress", *sets], nproc=2)
    assert ddp.returncode == 0, ddp.stderr[-2000:]
    single = _run_cli(
        [
            "pretrain",
            "xlm",
            "--run-dir",
            str(tmp_path / "single"),
            "--no-progress",
            *sets,
            "--set",
            "trainer.grad_accumulation=2",
        ]
    )
    assert single.returncode == 0, single.stderr[-2000:]
    a, b = losses(tmp_path / "ddp"), losses(tmp_path / "single")
    assert [s for s, _ in a] == [1, 2, 3, 4]
    for (_, x), (_, y) in zip(a, b, strict=True):
        assert x == pytest.approx(y, rel=1e-4)  # same data per slot; only float reduction order differs


@pytest.mark.integration
def test_cli_reports_bad_input_in_one_line(tmp_path):
    (tmp_path / "par").mkdir()
    (tmp_path / "par" / "en-de.en").write_text("a\nb\n")
    (tmp_path / "par" / "en-de.de").write_text("a\n")
    result = _run_cli(["prepare", "--out", str(tmp_path / "out"), "--parallel", str(tmp_path / "par")])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "en-de.en:2: parallel files differ in length" in result.stderr.replace("\n", "")


@pytest.mark.integration
def test_quickstart_runs_end_to_end(tmp_path):
    result = _run_cli(["quickstart", "--out", str(tmp_path / "qs"), "--steps", "3"])
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((tmp_path / "qs" / "report" / "quickstart.json").read_text())
    assert report["train"]["step"] == 3
    retrieval = report["after"]["tatoeba"]  # every held-out language, 100 pairs each, before and after training
    assert retrieval["sizes"] == dict.fromkeys(["cmn", "deu", "fra", "rus", "spa"], 100)
    assert sorted(retrieval["reported"]["per_language"]) == sorted(retrieval["sizes"])
    assert set(report["before"]["tatoeba"]) == {"xx_to_en", "en_to_xx", "both"}
    assert set(report["before"]["aer"]) == set(report["after"]["aer"]) == {"de-en", "en-fr", "zh-en"}
