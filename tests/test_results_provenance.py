"""Results say what they measured: every evaluation JSON names the model, its checkpoint step and the command,
plot titles name the model and step, classification scores come with chance and majority-class baselines, the
protocol says what was scored, and `finetune TASK --help` lists the task's --set keys and defaults."""

from __future__ import annotations

import gzip
import json
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from PIL import Image

from polyalign.checkpoint import checkpoint_dirs, load_model
from polyalign.cli import main
from polyalign.config import load_recipe
from polyalign.finetune import TASKS, FinetuneConfig, Subsample, build_task, finetune_task
from polyalign.finetune.results import class_baselines
from polyalign.train import pretrain
from tests.conftest import SAMPLE, tiny_recipe_overrides
from tests.test_finetune_loop import SMALL, write_pack


@pytest.fixture(scope="module")
def checkpoint(sample_prepared, tmp_path_factory) -> Path:
    """The step-2 checkpoint of a tiny run."""
    run = tmp_path_factory.mktemp("provenance") / "run"
    pretrain(load_recipe("mlm", tiny_recipe_overrides(sample_prepared, steps=2)), run, progress=False)
    return checkpoint_dirs(run)[-1]


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    return write_pack(tmp_path_factory.mktemp("pack"))


def run_as_user(args: list[str], monkeypatch) -> None:
    """`polyalign ARGS` as a user runs it (sys.argv is what results record as the command)."""
    monkeypatch.setattr(sys, "argv", ["polyalign", *args])
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 0


def bucc_files(folder: Path) -> Path:
    english = [t for t in (SAMPLE / "tatoeba" / "tatoeba.deu-eng.eng").read_text().splitlines() if t][:20]
    german = [t for t in (SAMPLE / "tatoeba" / "tatoeba.deu-eng.deu").read_text().splitlines() if t][:10]
    files = {
        "de": [f"de-{i}\t{t}" for i, t in enumerate(german + english[:4])],
        "en": [f"en-{j}\t{t}" for j, t in enumerate(english)],
        "gold": [f"de-{10 + j}\ten-{j}" for j in range(4)],
    }
    folder.mkdir()
    for suffix, lines in files.items():
        with gzip.open(folder / f"de-en.dev.{suffix}.gz", "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return folder


def plot_title(png: Path) -> str:
    return Image.open(png).text["Title"]


@pytest.mark.integration
def test_evaluation_results_name_model_step_and_command(checkpoint, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    common = ["--model", str(checkpoint), "--out", str(out), "--no-progress", "--device", "cpu"]
    commands = {
        "tatoeba": ["evaluate", "tatoeba", *common, "--data", str(SAMPLE / "tatoeba"), "--langs", "de,fr"],
        "alignment": ["evaluate", "alignment", *common, "--gold", str(SAMPLE / "word_alignment" / "de-en")],
        "bucc": ["evaluate", "bucc", *common, "--data", str(bucc_files(tmp_path / "bucc")), "--pair", "de-en"],
    }
    for name, args in commands.items():
        sweep = ["--layers", "all"] if name != "bucc" else []
        run_as_user([*args, *sweep], monkeypatch)
        result = json.loads((out / f"{name}.json").read_text())
        assert (result["model"], result["step"]) == (str(checkpoint), 2), name
        assert result["command"].startswith(f"polyalign {' '.join(args[:2])} --model {checkpoint}"), name
    assert f"{checkpoint}, step 2" in plot_title(out / "tatoeba_layers.png")
    assert f"{checkpoint}, step 2" in plot_title(next(out.glob("alignment*.png")))


def test_majority_baseline_is_the_training_majority_scored_on_each_test_set():
    baselines = class_baselines([0, 0, 0, 1, 2], {"en": [0, 1, 1, 0], "de": [2, 2, 2, 2]}, ("a", "b", "c"))
    assert baselines["majority_class"] == "a"
    assert baselines["chance"] == {"en": 33.33, "de": 33.33}
    assert baselines["majority"] == {"en": 50.0, "de": 0.0}  # de's own majority (c) is not what is predicted


@pytest.mark.integration
def test_finetune_results_carry_baselines_provenance_and_what_was_scored(
    checkpoint, pack, tmp_path, monkeypatch, capsys
):
    sets = [x for value in SMALL for x in ("--set", value)]
    args = ["finetune", "xnli", "--model", str(checkpoint), "--data", str(pack), "--seeds", "1", "--no-progress"]
    run_as_user([*args, "--max-train", "6", "--max-eval", "4", "--out", str(tmp_path / "ft"), *sets], monkeypatch)
    printed = capsys.readouterr().out
    saved = json.loads((tmp_path / "ft" / "finetune.json").read_text())
    assert (saved["model"], saved["step"]) == (str(checkpoint), 2)
    assert saved["command"].startswith("polyalign finetune xnli --model")
    (result,) = saved["results"]
    test_labels = {lang: [e.label for e in ex] for lang, ex in _xnli_test(pack, 4).items()}
    assert result["baselines"]["majority"]["en"] == pytest.approx(100 * test_labels["en"].count(0) / 4, abs=0.01)
    assert set(result["baselines"]["chance"].values()) == {33.33}
    for page in (printed, (tmp_path / "ft" / "finetune.md").read_text()):
        assert "| chance (%) | 33.3 |" in page and "| majority class (" in page
        assert f"{checkpoint}, step 2" in page or f"`{checkpoint}`, step 2" in page
    assert "scored on 4 test examples per language, not the full test sets" in result["protocol"]


def _xnli_test(pack: Path, n: int) -> dict:
    return build_task("xnli").load(pack, "transfer", Subsample(max_eval=n)).test


@pytest.mark.integration
def test_pawsx_protocol_counts_the_test_sets_it_names_and_max_steps_caps_training(checkpoint, pack):
    loaded = load_model(checkpoint)
    result = finetune_task(
        loaded, "pawsx", pack, "transfer", 1, [*SMALL, "finetune.max_steps=1"], Subsample(max_eval=3), progress=False
    )
    assert result["runs"][0]["steps"] == 1
    assert "test-zh.tsv (6 and 6 pairs)" in result["protocol"]  # the pack's, not the real set's 2,000
    assert "scored on 3 test examples per language" in result["protocol"]


def test_finetune_task_help_lists_every_set_key_with_its_default(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "100")
    for name in TASKS:
        with pytest.raises(SystemExit):
            main(["finetune", name, "--help"])
        text = capsys.readouterr().out
        task = build_task(name)
        transfer = FinetuneConfig(**task.defaults["transfer"])
        for field in fields(FinetuneConfig):
            assert f"  finetune.{field.name}={getattr(transfer, field.name)} " in text, (name, field.name)
        for field in fields(task.options):
            assert f"  task.{field.name}={getattr(task.options, field.name)} " in text, (name, field.name)
    main_help = "finetune", "xnli", "--help"
    with pytest.raises(SystemExit):
        main(list(main_help))
    text = capsys.readouterr().out
    assert "  finetune.max_steps=0 " in text and "  finetune.batch_size=32 " in text
    assert "translate-train-all: 128." in text
