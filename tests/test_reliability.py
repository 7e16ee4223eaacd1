"""Bad input ends in one line and exit code 2 with nothing created; runs survive being killed at any moment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from polyalign.checkpoint import checkpoint_dirs, resume_checkpoint
from polyalign.cli import main
from polyalign.config import load_recipe
from polyalign.io import DataError, atomic_dir, atomic_write_text
from polyalign.train import load_run_recipe, pretrain
from tests.conftest import SAMPLE, losses, tiny_recipe_overrides


@pytest.fixture(scope="module")
def tiny_run(sample_prepared, tmp_path_factory) -> Path:
    """A 2-step MLM run with one checkpoint (step 2)."""
    run = tmp_path_factory.mktemp("reliability") / "run"
    pretrain(load_recipe("mlm", tiny_recipe_overrides(sample_prepared, steps=2)), run, progress=False)
    return run


# ---------------------------------------------------------------------------------------------------------
# Every bad input: exit code 2, one line naming the file:line or the key, nothing created on disk.


def _recipe_file(tmp: Path, trainer_line: str) -> str:
    path = tmp / "bad.yaml"
    path.write_text(f"model:\n  hidden_size: 32\nobjectives:\n  - name: mlm\ntrainer:\n  {trainer_line}\n")
    return str(path)


def _pretrain(tmp, prepared, *extra):
    return ["pretrain", "mlm", "--data", str(prepared), "--run-dir", str(tmp / "new-run"), "--no-progress", *extra]


def _pretrain_file(tmp, prepared, trainer_line):
    args = _pretrain(tmp, prepared)
    args[1] = _recipe_file(tmp, trainer_line)
    return args


def _truncated_resume(tmp, prepared, run):
    copy = tmp / "damaged-run"
    shutil.copytree(run, copy)
    state = checkpoint_dirs(copy)[-1] / "trainer_state.safetensors"
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    return ["pretrain", "--resume", "--run-dir", str(copy), "--no-progress"]


def _tatoeba_bad_line(tmp, prepared, run):
    data = tmp / "tatoeba"
    data.mkdir()
    (data / "tatoeba.deu-eng.deu").write_text("Hallo\n\nWelt\n")
    (data / "tatoeba.deu-eng.eng").write_text("Hello\nthere\nWorld\n")
    return ["evaluate", "tatoeba", "--model", str(run), "--data", str(data), "--langs", "de", "--no-progress"]


def _evaluate(tmp, run, command, *options):
    return ["evaluate", command, "--model", str(run), "--out", str(tmp / "out"), "--no-progress", *options]


def _unequal_parallel(tmp, prepared, run):
    par = tmp / "par"
    par.mkdir()
    (par / "de-en.de").write_text("a\nb\nc\n")
    (par / "de-en.en").write_text("a\nb\n")
    return ["prepare", "--out", str(tmp / "out"), "--parallel", str(par), "--vocab-size", "50"]


SET_ERRORS = {  # `pretrain mlm --set VALUE` -> what the one line says
    "model.hiden_size=32": "--set model.hiden_size=32: model.hiden_size: unknown key; known: vocab_size",
    "objectives.0.config.mask_rate=0.2": "objectives.0.config.mask_rate: unknown key; known: mask_prob",
    "objectives.5.weight=1": "--set objectives.5.weight=1: objectives.5: no such item; the list has 1",
    "trainer.max_steps.x=2": "trainer.max_steps is 4000, which has no key 'x'",
    "objectives=mlm": "--set objectives=mlm: objectives: 'mlm' is not a list",
    "objectives=[]": "--set objectives=[]: objectives: the list is empty; name at least one objective",
}
TRAINER_LINE_ERRORS = {  # `pretrain bad.yaml`, a recipe file whose trainer section holds LINE -> what the line says
    "lr: fast": "bad.yaml:6: trainer.lr: 'fast' is not a number",
    "betas: 0.9": "bad.yaml:6: trainer.betas: 0.9 is not a list of 2 values",
    'max_steps: "2"': "bad.yaml:6: trainer.max_steps: '2' is not an integer",
    "warmup_steps: 1.5": "bad.yaml:6: trainer.warmup_steps: 1.5 is not an integer",
    "max_steps: 0": "bad.yaml:5: trainer: max_steps=0: must be at least 1",
}
CASES = {
    **{
        f"--set {value}": (lambda t, p, r, value=value: _pretrain(t, p, "--set", value), expected)
        for value, expected in SET_ERRORS.items()
    },
    **{
        line: (lambda t, p, r, line=line: _pretrain_file(t, p, line), expected)
        for line, expected in TRAINER_LINE_ERRORS.items()
    },
    "--bad-lines ignore": (
        lambda t, p, r: ["prepare", "--out", str(t / "out"), "--mono", str(t), "--bad-lines", "ignore"],
        "Invalid value for '--bad-lines': Value error, 'ignore' is not one of 'skip', 'error'",
    ),
    "align with a missing --src": (
        lambda t, p, r: ["align", "--model", str(r), "--src", str(t / "missing.txt"), "--tgt", str(t / "x.txt")],
        "missing.txt: file not found",
    ),
    "truncated trainer state on resume": (
        _truncated_resume,
        "trainer_state.safetensors: damaged (Error while deserializing header",
    ),
    "--resume where no run is": (
        lambda t, p, r: [*_pretrain(t, p), "--resume"],
        "holds no run to resume; drop --resume to start one there",
    ),
    "tatoeba --layers beyond the model": (
        lambda t, p, r: _evaluate(
            t, r, "tatoeba", "--data", str(SAMPLE / "tatoeba"), "--langs", "de", "--layers", "99"
        ),
        "--layers 99: the only value is `all` (a sweep over layers 0..2); for one layer use --layer L with L in 0..2",
    ),
    "tatoeba --layer beyond the model": (
        lambda t, p, r: _evaluate(t, r, "tatoeba", "--data", str(SAMPLE / "tatoeba"), "--langs", "de", "--layer", "99"),
        "--layer 99: the model has layers 0..2 (0 = embeddings)",
    ),
    "alignment --layers beyond the model": (
        lambda t, p, r: _evaluate(
            t, r, "alignment", "--gold", str(SAMPLE / "word_alignment" / "de-en"), "--layers", "9"
        ),
        "--layers 9: the only value is `all` (a sweep over layers 0..2)",
    ),
    "bucc --layer beyond the model": (
        lambda t, p, r: (t / "in").mkdir() or _evaluate(t, r, "bucc", "--data", str(t / "in"), "--layer", "99"),
        "--layer 99: the model has layers 0..2 (0 = embeddings)",
    ),
    "tatoeba bad line": (_tatoeba_bad_line, "tatoeba.deu-eng.deu:2: empty line; evaluation files must have no bad"),
    "parallel files of different lengths": (
        _unequal_parallel,
        "de-en.de:3: parallel files differ in length",
    ),
}


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.integration
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_creates_nothing(case, sample_prepared, tiny_run, tmp_path, capsys):
    make_args, expected = CASES[case]
    args = make_args(tmp_path, sample_prepared, tiny_run)
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2, err
    assert err.count("\n") == 0, err  # one line, no traceback
    assert err.startswith("error: ") and expected in err, err
    assert "--bad-lines" not in err or case == "--bad-lines ignore"  # no advice to use an option that isn't there
    assert _snapshot(tmp_path) == before
    assert not (tmp_path / "new-run").exists() and not (tmp_path / "out").exists()


def test_unequal_parallel_files_are_refused_before_any_tokenizer_work(tmp_path, monkeypatch):
    import polyalign.data.prepare as prep

    def tokenizer_work(*args, **kwargs):
        raise AssertionError("tokenizer work started before the length check")

    monkeypatch.setattr(prep, "sample_tokenizer_text", tokenizer_work)
    monkeypatch.setattr(prep, "load_tokenizer", tokenizer_work)
    args = _unequal_parallel(tmp_path, None, None)
    corpus = prep.discover_corpus(None, tmp_path / "par")
    for source in (None, tmp_path):
        with pytest.raises(DataError, match="parallel files differ in length"):
            prep.prepare(corpus, prep.PrepareConfig(out=Path(args[2]), tokenizer_from=source))


@pytest.mark.integration
def test_saved_recipe_has_absolute_paths_so_resume_works_from_elsewhere(sample_prepared, tmp_path, monkeypatch):
    monkeypatch.chdir(sample_prepared.parent)
    recipe = load_recipe("mlm", [*tiny_recipe_overrides(Path(sample_prepared.name)), "trainer.max_steps=1"])
    pretrain(recipe, tmp_path / "run", progress=False)
    monkeypatch.chdir(tmp_path)
    resumed = load_run_recipe(tmp_path / "run", ["trainer.max_steps=2"])
    assert resumed.data.prepared == str(sample_prepared)
    assert pretrain(resumed, tmp_path / "run", resume=True, progress=False)["step"] == 2


# ---------------------------------------------------------------------------------------------------------
# Nothing lost


def _fake_checkpoint(run: Path, step: int) -> Path:
    folder = run / "checkpoints" / f"step-{step:07d}"
    folder.mkdir(parents=True)
    for name in ("config.json", "trainer_state.json"):
        (folder / name).write_text(json.dumps({"step": step}))
    for name in ("model.safetensors", "objectives.safetensors", "trainer_state.safetensors"):
        save_file({"x": torch.zeros(64)}, str(folder / name))
    return folder


def test_resume_falls_back_past_damaged_checkpoints_and_says_so(tmp_path, capsys):
    for step in (2, 4, 6):
        _fake_checkpoint(tmp_path, step)
    newest = tmp_path / "checkpoints" / "step-0000006" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:-8])  # truncated
    (tmp_path / "checkpoints" / "step-0000004" / "trainer_state.json").write_text('{"step": ')
    (tmp_path / "checkpoints" / ".step-0000008.tmp-abc").mkdir()  # a save killed midway
    assert resume_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step-0000002"
    err = capsys.readouterr().err
    assert "step-0000006/model.safetensors: damaged" in err and "step-0000004/trainer_state.json" in err
    assert "resuming from the previous kept checkpoint, step-0000002" in err
    assert not (tmp_path / "checkpoints" / ".step-0000008.tmp-abc").exists()


@pytest.mark.integration
def test_resumed_run_after_damage_and_a_cut_metrics_line_repeats_the_loss_curve(sample_prepared, tmp_path):
    overrides = tiny_recipe_overrides(sample_prepared, steps=6) + ["trainer.save_every=2", "trainer.keep_checkpoints=2"]
    pretrain(load_recipe("mlm", overrides), tmp_path / "straight", progress=False)
    pretrain(load_recipe("mlm", [*overrides, "trainer.stop_at=4"]), tmp_path / "killed", progress=False)
    latest = checkpoint_dirs(tmp_path / "killed")[-1]
    (latest / "objectives.safetensors").write_bytes(b"")  # damaged: resume must go back to step 2
    with open(tmp_path / "killed" / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "lo')  # a line cut short by the kill
    recipe = load_run_recipe(tmp_path / "killed", ["trainer.stop_at=0"])
    pretrain(recipe, tmp_path / "killed", resume=True, progress=False)
    assert losses(tmp_path / "killed") == losses(tmp_path / "straight")


@pytest.mark.integration
def test_run_killed_before_its_first_checkpoint_can_be_resumed(sample_prepared, tmp_path):
    overrides = tiny_recipe_overrides(sample_prepared, steps=2)
    pretrain(load_recipe("mlm", overrides), tmp_path / "straight", progress=False)
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(tmp_path / "straight" / "recipe.yaml", half / "recipe.yaml")  # what a kill at step 1 leaves
    (half / "metrics.jsonl").write_text('{"step": 1, "loss": 99.0}\n')
    pretrain(load_run_recipe(half), half, resume=True, progress=False)
    assert losses(half) == losses(tmp_path / "straight")


def test_written_folders_and_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        with atomic_dir(tmp_path / "model") as tmp:
            (tmp / "weights").write_bytes(b"x")
        atomic_write_text(tmp_path / "model" / "config.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "model").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "model" / "config.json").stat().st_mode & 0o777 == 0o644


def test_atomic_dir_fsyncs_every_file_then_publishes_then_fsyncs_the_parent(tmp_path, monkeypatch):
    import polyalign.io as io

    events: list[tuple[str, str]] = []
    monkeypatch.setattr(io, "fsync_path", lambda p: events.append(("fsync", Path(p).name)))
    real_replace = os.replace
    monkeypatch.setattr(io.os, "replace", lambda a, b: (events.append(("rename", Path(b).name)), real_replace(a, b)))
    with atomic_dir(tmp_path / "ckpt") as tmp:
        (tmp / "a.safetensors").write_bytes(b"a")
    names = [e for e in events]
    assert names.index(("fsync", "a.safetensors")) < names.index(("rename", "ckpt"))
    assert names[-1] == ("fsync", tmp_path.name)  # the rename itself made durable


# ---------------------------------------------------------------------------------------------------------
# Progress and options


@pytest.mark.integration
def test_progress_in_a_log_file_is_plain_lines(tmp_path):
    log = tmp_path / "log.txt"
    code = (
        "from polyalign.progress import tqdm, ticking\n"
        "import polyalign.progress as p; p.LOG_INTERVAL = 0.0\n"
        "with ticking('train tokenizer', every=0.05):\n    import time; time.sleep(0.2)\n"
        "for _ in tqdm(range(50), desc='tokenize', mininterval=0): pass\n"
    )
    with open(log, "w") as f:
        subprocess.run(
            [os.sys.executable, "-c", code], stderr=f, check=True, env={**os.environ, "PYTHONPATH": os.getcwd()}
        )
    text = log.read_text()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert all(line.strip() for line in lines)
    assert any(line.startswith("train tokenizer: ") for line in lines)
    assert any("tokenize" in line and "50/50" in line for line in lines)


def test_progress_off_a_terminal_is_one_line_per_phase_when_it_ends(capsys):
    """No `0 lines [00:00, ? lines/s]` when a phase starts, no start line repeated when it ends, and nothing for
    a phase that counted nothing (capsys's stderr is not a terminal)."""
    from polyalign.progress import ticking, tqdm

    with ticking("train tokenizer"):
        pass
    for _ in tqdm((i for i in range(3)), desc="tokenize de.txt", unit=" lines", leave=False):
        pass
    for _ in tqdm((i for i in range(0)), desc="tokenize empty.txt", unit=" lines"):
        pass
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("train tokenizer: 00:00 elapsed")
    assert lines[1].startswith("tokenize de.txt: 3 lines [")


@pytest.mark.integration
def test_prepare_takes_a_model_folder_as_tokenizer_and_shows_tokenizer_training(tiny_run, tmp_path, capsys):
    from polyalign.data.prepare import PrepareConfig, discover_corpus, prepare
    from polyalign.data.prepared import PreparedData

    (tmp_path / "mono").mkdir()
    (tmp_path / "mono" / "en.txt").write_text("a small corpus\nof two lines\n")
    corpus = discover_corpus(tmp_path / "mono", None)
    model_folder = checkpoint_dirs(tiny_run)[-1]
    prepare(corpus, PrepareConfig(out=tmp_path / "from-model", tokenizer_from=model_folder, progress=False))
    assert PreparedData(tmp_path / "from-model").tokenizer().special.vocab_size == 2000
    prepare(corpus, PrepareConfig(out=tmp_path / "trained", vocab_size=30))
    assert "train tokenizer" in capsys.readouterr().err


def test_every_command_with_progress_has_no_progress_and_choices_are_listed():
    import enum
    import typing

    import typer

    from polyalign.cli import app

    group = typer.main.get_command(app)
    commands = {name: cmd for name, cmd in group.commands.items() if name != "evaluate"}
    commands |= {f"evaluate {n}": c for n, c in group.commands["evaluate"].commands.items()}
    for name in ("prepare", "pretrain", "align", "evaluate tatoeba", "evaluate alignment", "finetune", "xtreme"):
        assert "--no-progress" in [o for p in commands[name].params for o in p.secondary_opts], name

    def enumeration(param) -> bool:  # typer lists an Enum option's values in --help and rejects others
        annotation = param.type_descriptor.annotation
        return any(
            isinstance(a, type) and issubclass(a, enum.Enum) for a in typing.get_args(annotation) or [annotation]
        )

    params = {p.name: p for cmd in commands.values() for p in cmd.params}
    for option in ("bad_lines", "method", "encoding", "setting", "pooling", "score", "precision"):
        assert enumeration(params[option]), option


def test_finetune_set_uses_the_recipe_value_checks():
    from polyalign.finetune.loop import FinetuneConfig, apply_overrides
    from polyalign.finetune.pairs import PairOptions

    sets = ["finetune.lr=1e-4", "finetune.epochs=2", "finetune.max_length=64", "task.pooling=mean"]
    config, options = apply_overrides(FinetuneConfig(), PairOptions(), sets)
    assert (config.lr, config.epochs, config.max_length, options.pooling) == (1e-4, 2.0, 64, "mean")
    bad = r"--set finetune.max_length=1\.5: finetune.max_length: 1\.5 is not an integer"
    with pytest.raises(DataError, match=bad):
        apply_overrides(FinetuneConfig(), PairOptions(), ["finetune.max_length=1.5"])
    with pytest.raises(DataError, match="finetune.lr: 'fast' is not a number"):
        apply_overrides(FinetuneConfig(), PairOptions(), ["finetune.lr=fast"])
    with pytest.raises(DataError, match=r"--set lr=1: lr: unknown key; keys are finetune\.NAME or task\.NAME"):
        apply_overrides(FinetuneConfig(), PairOptions(), ["lr=1"])  # the flat keys of before
