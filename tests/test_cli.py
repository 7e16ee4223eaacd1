"""The CLI package: one `--set` grammar (a dotted key into a typed config) for pretrain, finetune and xtreme, the
evaluation data found without the working directory, and help and docstring naming every command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import polyalign.cli
import polyalign.finetune
import polyalign.train
from polyalign.cli.finetune import overrides_for
from polyalign.cli.options import CHECKOUT_EVAL_DATA, EVAL_DATA_ENV, eval_data
from polyalign.finetune import build_task, configure
from polyalign.io import DataError
from tests.test_messages import all_commands, fails, help_text


class Stop(DataError):
    """Raised where a command would start its work: what reached that point has been recorded."""


@pytest.fixture
def reached(monkeypatch) -> list:
    """Runs pretrain, finetune and xtreme up to their work and records the typed config each built from --set."""
    seen = []

    def record_recipe(spec, run_dir, **_):
        seen.append({"trainer.lr": spec.trainer.lr})
        raise Stop("stop")

    def record_configure(task, setting, overrides=None):
        config = configure(task, setting, overrides)
        seen.append({"task": task.name, "finetune.lr": config.lr, "task.pooling": task.options.pooling})
        return config

    def no_model(*_):
        raise Stop("stop")

    monkeypatch.setattr(polyalign.train, "pretrain", record_recipe)
    monkeypatch.setattr(polyalign.finetune, "configure", record_configure)
    monkeypatch.setattr(polyalign.cli.finetune, "load_on_device", no_model)
    monkeypatch.setenv(EVAL_DATA_ENV, str(Path(__file__).parent))  # any folder: no data is read before the model
    return seen


def test_pretrain_finetune_and_xtreme_read_a_dotted_set_into_their_typed_config(reached, tmp_path, capsys):
    fails(["pretrain", "mlm", "--run-dir", str(tmp_path / "run"), "--set", "trainer.lr=1e-4"], capsys)
    assert reached.pop() == {"trainer.lr": 1e-4}

    finetune = ["finetune", "xnli", "--model", "m", "--set", "finetune.lr=1e-4", "--set", "task.pooling=mean"]
    fails(finetune, capsys)
    assert reached.pop() == {"task": "xnli", "finetune.lr": 1e-4, "task.pooling": "mean"}

    xtreme = ["xtreme", "--model", "m", "--tasks", "xnli,pawsx", "--set", "finetune.lr=1e-4"]
    fails([*xtreme, "--set", "pawsx.finetune.lr=2e-4", "--set", "pawsx.task.pooling=mean"], capsys)
    assert reached == [
        {"task": "xnli", "finetune.lr": 1e-4, "task.pooling": "first"},
        {"task": "pawsx", "finetune.lr": 2e-4, "task.pooling": "mean"},  # the task's own value wins
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["pretrain", "mlm", "--run-dir", "unmade", "--set", "trainer.rate=1"],
            "trainer.rate: unknown key; known: max_steps, ",
        ),
        (["finetune", "ner", "--model", "m", "--set", "finetune.rate=1"], "finetune.rate: unknown key; known: lr, "),
        (["finetune", "ner", "--model", "m", "--set", "lr=1"], "keys are finetune.NAME or task.NAME (finetune.lr, "),
        (["xtreme", "--model", "m", "--tasks", "ner", "--set", "ner.finetune.rate=1"], "known: lr, batch_size, "),
        (["xtreme", "--model", "m", "--tasks", "ner", "--set", "xnli.task.pooling=mean"], "known: finetune, task, ner"),
    ],
)
def test_an_unknown_set_key_is_one_line_naming_the_known_keys(args, expected, reached, capsys):
    err = fails(args, capsys)
    assert expected in err and reached == [], err


def test_xtreme_hands_each_task_the_shared_keys_then_its_own():
    sets = ["finetune.epochs=1", "xnli.task.pooling=mean", "ner.finetune.lr=2e-5", "finetune.lr=1e-4"]
    assert overrides_for("xnli", ["xnli", "ner"], sets) == [
        "finetune.epochs=1",
        "finetune.lr=1e-4",
        "task.pooling=mean",
    ]
    assert overrides_for("ner", ["xnli", "ner"], sets) == ["finetune.epochs=1", "finetune.lr=1e-4", "finetune.lr=2e-5"]
    task = build_task("xnli")
    assert configure(task, "transfer", ["finetune.lr=1e-4", "finetune.lr=3e-4"]).lr == 3e-4  # the last one wins


# ---------------------------------------------------------------------------------------------------------
# Evaluation data: --data, else $POLYALIGN_DATA, else beside the checkout; never the working directory


def test_evaluation_data_comes_from_the_option_the_environment_or_the_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pack").mkdir()
    assert eval_data(Path("mine"), "tatoeba") == Path("mine")
    monkeypatch.setenv(EVAL_DATA_ENV, str(tmp_path / "pack"))
    assert eval_data(None, "tatoeba") == tmp_path / "pack" / "tatoeba"
    monkeypatch.delenv(EVAL_DATA_ENV)
    checkout = Path(polyalign.__file__).resolve().parents[1]
    assert checkout.parent / "shared" / "data" / "eval" == CHECKOUT_EVAL_DATA
    monkeypatch.setattr(polyalign.cli.options, "CHECKOUT_EVAL_DATA", tmp_path / "pack")
    assert eval_data(None, "xnli") == tmp_path / "pack" / "xnli"
    monkeypatch.setattr(polyalign.cli.options, "CHECKOUT_EVAL_DATA", tmp_path / "none")
    with pytest.raises(DataError, match=f"none: no evaluation data pack there; pass --data, or set {EVAL_DATA_ENV}"):
        eval_data(None)


def test_no_default_of_any_command_depends_on_the_working_directory(tmp_path, monkeypatch, capsys):
    (tmp_path / "work").mkdir()
    (tmp_path / "shared" / "data" / "eval" / "tatoeba").mkdir(parents=True)  # where `../shared` would lead
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv(EVAL_DATA_ENV, str(tmp_path / "pack"))
    (tmp_path / "pack").mkdir()
    err = fails(["evaluate", "tatoeba", "--model", "m"], capsys)
    assert f"{tmp_path / 'pack' / 'tatoeba'}: no tatoeba" in err, err
    for name, command in all_commands().items():
        for param in command.params:
            default = param.default
            if isinstance(default, Path):
                pytest.fail(f"{name} --{param.name} defaults to {default}, a path relative to the working directory")
    # The folders a command writes are the user's to name: without one, one line says which option is missing.
    assert "Missing option '--run-dir'" in fails(["pretrain", "mlm"], capsys)
    assert "Missing option '--out'" in fails(["quickstart"], capsys)


# ---------------------------------------------------------------------------------------------------------
# Every command named


def test_help_and_the_package_docstring_name_every_command(capsys):
    top = help_text([], capsys)
    evaluate = help_text(["evaluate"], capsys)
    for name in all_commands():
        group, _, sub = name.rpartition(" ")
        assert f"  {sub} " in (evaluate if group else top), name
        assert re.search(rf"\b{sub}\b", polyalign.cli.__doc__), name
