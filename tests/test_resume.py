"""No silent surprise in a run: a resume that names another recipe or asks for no new steps is refused
with the reason; a resume to more steps is recorded in the run's recipe; checkpoints may keep weights only, or the
last N, and deleting old ones deletes nothing else; a parallel-only corpus feeds MLM its sides; a warm-up longer
than the run is cut and said."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from safetensors import safe_open

from polyalign.checkpoint import checkpoint_dirs
from polyalign.config import load_recipe
from polyalign.io import DataError
from polyalign.train import load_run_recipe, pretrain
from tests.conftest import SAMPLE, losses, tiny_recipe_overrides

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def two_step_run(sample_prepared, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("resume") / "run"
    pretrain(load_recipe("mlm", tiny_recipe_overrides(sample_prepared, 2)), run, progress=False)
    return run


@pytest.mark.integration
def test_a_resume_naming_another_recipe_is_refused(two_step_run):
    with pytest.raises(DataError, match=r"is a run of recipe 'mlm', not 'xlm'; drop the recipe name"):
        load_run_recipe(two_step_run, named="xlm")
    assert load_run_recipe(two_step_run, named="mlm").name == "mlm"


@pytest.mark.integration
@pytest.mark.parametrize("setting", ["trainer.max_steps=2", "trainer.max_steps=1", "trainer.stop_at=2"])
def test_a_resume_with_no_step_left_is_refused_before_any_work(two_step_run, setting):
    before = sorted(p.name for p in two_step_run.rglob("*"))
    with pytest.raises(DataError, match=r"is at step 2 and trainer\.(max_steps|stop_at)=\d leaves no step to train"):
        pretrain(load_run_recipe(two_step_run, [setting]), two_step_run, resume=True, progress=False)
    assert sorted(p.name for p in two_step_run.rglob("*")) == before


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "polyalign.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.integration
def test_cli_resume_refuses_in_one_line_records_the_new_recipe_and_times_this_command(sample_prepared, tmp_path):
    run = tmp_path / "run"
    sets = [a for o in tiny_recipe_overrides(sample_prepared, 2) for a in ("--set", o)]
    assert _cli("pretrain", "mlm", "--run-dir", str(run), "--no-progress", *sets).returncode == 0
    for args, reason in [
        (["xlm"], "is a run of recipe 'mlm', not 'xlm'"),
        (["--set", "trainer.max_steps=2"], "trainer.max_steps=2 leaves no step to train"),
    ]:
        refused = _cli("pretrain", *args, "--resume", "--run-dir", str(run), "--no-progress")
        assert refused.returncode == 2 and "Traceback" not in refused.stderr
        assert reason in " ".join(refused.stderr.split()) and len(refused.stderr.strip().splitlines()) == 1
    resumed = _cli(
        "pretrain", "mlm", "--resume", "--run-dir", str(run), "--no-progress", "--set", "trainer.max_steps=3"
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    said = " ".join((resumed.stdout + resumed.stderr).split())
    assert "done: 1 steps in " in said and "(the run: 3 steps," in said  # this command's step and minutes first
    text = (run / "recipe.yaml").read_text()
    assert yaml.safe_load(text)["trainer"]["max_steps"] == 3
    assert "# resumed at step 2: trainer.max_steps: 2 -> 3" in text


@pytest.mark.integration
def test_keep_last_checkpoint_deletes_only_old_step_folders(sample_prepared, tmp_path):
    run = tmp_path / "run"
    overrides = [*tiny_recipe_overrides(sample_prepared, 3), "trainer.save_every=1", "trainer.keep_checkpoints=1"]
    pretrain(load_recipe("mlm", [*overrides, "trainer.stop_at=1"]), run, progress=False)
    (run / "checkpoints" / "step-best").mkdir(parents=True)  # a user's own folders and files beside the steps
    (run / "checkpoints" / "notes.txt").write_text("mine")
    (run / "checkpoints" / "step-0000001.bak").mkdir()
    (run / "checkpoints" / "step-0000001.bak" / "model.safetensors").write_text("mine")
    (run / "mine.txt").write_text("mine")
    pretrain(load_run_recipe(run, ["trainer.stop_at=0"]), run, resume=True, progress=False)
    assert [p.name for p in checkpoint_dirs(run)] == ["step-0000003"]
    kept = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert kept == ["notes.txt", "step-0000001.bak", "step-0000003", "step-best"]
    assert (run / "mine.txt").read_text() == "mine"
    assert (run / "checkpoints" / "step-0000001.bak" / "model.safetensors").read_text() == "mine"


@pytest.mark.integration
def test_weights_only_checkpoints_hold_no_moments_and_resume_with_fresh_ones_said(sample_prepared, tmp_path, capsys):
    overrides = [*tiny_recipe_overrides(sample_prepared, 4), "trainer.save_every=100", "trainer.stop_at=2"]
    for name, keep in (("full", "true"), ("weights", "false")):
        pretrain(load_recipe("mlm", [*overrides, f"trainer.checkpoint_optimizer={keep}"]), tmp_path / name, False)
    sizes = {}
    for name in ("full", "weights"):
        state = checkpoint_dirs(tmp_path / name)[-1] / "trainer_state.safetensors"
        with safe_open(str(state), framework="pt") as f:
            sizes[name] = sum(1 for k in f.keys() if k.startswith("optimizer."))  # noqa: SIM118 (not a dict)
    assert sizes["full"] > 0 and sizes["weights"] == 0
    capsys.readouterr()
    recipe = load_run_recipe(tmp_path / "weights", ["trainer.stop_at=0"])
    assert pretrain(recipe, tmp_path / "weights", resume=True, progress=False)["step"] == 4
    assert "holds no optimizer moments (trainer.checkpoint_optimizer=false): AdamW starts them afresh" in (
        capsys.readouterr().out
    )


@pytest.mark.integration
def test_a_parallel_only_corpus_gives_mlm_the_sides_and_says_so_once(tmp_path, capsys):
    from polyalign.data.prepare import PrepareConfig, discover_corpus, prepare

    prepared = tmp_path / "parallel-only"
    prepare(discover_corpus(None, SAMPLE / "parallel"), PrepareConfig(out=prepared, vocab_size=1000, workers=1))
    capsys.readouterr()
    overrides = [*tiny_recipe_overrides(prepared, 2), "trainer.grad_accumulation=2"]
    pretrain(load_recipe("xlm", overrides), tmp_path / "run", progress=False)
    said = capsys.readouterr().out
    assert said.count("has no monolingual text") == 1
    assert "mlm read both sides of its parallel pairs as monolingual text (prepare with --mono" in said
    assert [step for step, _ in losses(tmp_path / "run")] == [1, 2]


@pytest.mark.integration
def test_a_warmup_longer_than_the_run_is_cut_and_said(sample_prepared, tmp_path, capsys):
    overrides = [*tiny_recipe_overrides(sample_prepared, 3), "trainer.warmup_steps=200"]
    pretrain(load_recipe("mlm", overrides), tmp_path / "run", progress=False)
    assert "trainer.warmup_steps=200 is not shorter than trainer.max_steps=3" in capsys.readouterr().out
    assert yaml.safe_load((tmp_path / "run" / "recipe.yaml").read_text())["trainer"]["warmup_steps"] == 0
