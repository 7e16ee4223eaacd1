"""Help and errors that say what to run: readable help at 80 columns, and one-line errors that name the fix,
before any work or progress output, with nothing created on disk."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from polyalign.checkpoint import checkpoint_dirs
from polyalign.cli import app, main
from polyalign.config import load_recipe
from polyalign.train import pretrain
from tests.conftest import tiny_recipe_overrides


@pytest.fixture(scope="module")
def tiny_run(sample_prepared, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("messages") / "run"
    pretrain(load_recipe("mlm", tiny_recipe_overrides(sample_prepared, steps=1)), run, progress=False)
    return run


def snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*"))}


def fails(args: list[str], capsys) -> str:
    """The whole of stderr of a command that must fail with exit code 2 in one line."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: "), err  # nothing before it, no traceback
    return err.strip()


def help_text(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def all_commands() -> dict[str, object]:
    group = typer.main.get_command(app)
    commands = {name: cmd for name, cmd in group.commands.items() if name != "evaluate"}
    return commands | {f"evaluate {n}": c for n, c in group.commands["evaluate"].commands.items()}


# ---------------------------------------------------------------------------------------------------------
# Help


def test_help_at_80_columns_shows_every_option_name_whole(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    for name, command in all_commands().items():
        text = help_text(name.split(), capsys)
        assert "…" not in text, name
        assert max(map(len, text.splitlines())) <= 80, name
        for option in (o for p in command.params for o in [*p.opts, *p.secondary_opts] if o.startswith("--")):
            assert re.search(rf"(^|\s){re.escape(option)}(\s|,|$)", text, re.M), (name, option)


def test_resume_help_names_the_run_dir_option(capsys):
    text = " ".join(help_text(["pretrain"], capsys).split())
    assert "Continue the run in --run-dir from its latest checkpoint" in text


# ---------------------------------------------------------------------------------------------------------
# Errors that say what to run instead


def test_prepare_onto_an_existing_folder_names_overwrite(tmp_path, capsys):
    (tmp_path / "mono").mkdir()
    (tmp_path / "mono" / "en.txt").write_text("one line\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("the user's")
    before = snapshot(tmp_path)
    err = fails(["prepare", "--out", str(tmp_path / "out"), "--mono", str(tmp_path / "mono")], capsys)
    assert f"{tmp_path / 'out'}: already exists; pass --overwrite to replace it" in err
    assert snapshot(tmp_path) == before


@pytest.mark.integration
def test_data_that_is_a_model_folder_says_run_prepare(tiny_run, tmp_path, capsys):
    model = checkpoint_dirs(tiny_run)[-1]
    args = ["pretrain", "mlm", "--data", str(model), "--run-dir", str(tmp_path / "new-run"), "--no-progress"]
    err = fails(args, capsys)
    assert f"{model}: not a prepared corpus (no meta.json): run `polyalign prepare" in err
    assert not (tmp_path / "new-run").exists()


@pytest.mark.integration
def test_model_that_is_a_checkpoints_folder_points_at_its_step_folders(tiny_run, tmp_path, capsys):
    checkpoints = tiny_run / "checkpoints"
    err = fails(["export", "--model", str(checkpoints), "--out", str(tmp_path / "out")], capsys)
    assert f"{checkpoints}: a checkpoints folder: pass one of its step folders, e.g. {checkpoints}/step-" in err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------
# --bad-lines error: the bad line is the first and only thing said, and nothing is created


BAD_INPUTS = {  # file name -> (bytes, what the one line says)
    "mono/de.txt": (b"gut\nschlecht \xff\xfe\nauch gut\n", "de.txt:2: invalid UTF-8 (byte 0xff at byte 10)"),
    "parallel/de-en.tsv": (b"a\tb\nno tab here\nc\td\n", "de-en.tsv:2: expected 2 tab-separated columns, found 1"),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
@pytest.mark.parametrize("workers", ["1", "2"])
def test_bad_line_is_reported_before_any_work_and_nothing_is_created(name, workers, tmp_path, capsys):
    content, expected = BAD_INPUTS[name]
    data = tmp_path / "data"
    (data / "mono").mkdir(parents=True)
    (data / "parallel").mkdir()
    (data / "mono" / "en.txt").write_text("a good line\n" * 50)
    (data / name).write_bytes(content)
    before = snapshot(tmp_path)
    out = tmp_path / "new" / "prepared"
    args = ["prepare", "--out", str(out), "--mono", str(data / "mono"), "--parallel", str(data / "parallel")]
    err = fails([*args, "--vocab-size", "40", "--bad-lines", "error", "--workers", workers], capsys)
    assert expected in err
    assert snapshot(tmp_path) == before  # not even the parent of --out
