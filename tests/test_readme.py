"""The README's code runs: the Python example (on a tiny model standing in for multilingual-e5-small) and the
"add an objective" example (one training step through the trainer)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def python_block(after_heading: str) -> str:
    """The first ```python block after a `## ` heading."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(f"## {after_heading}") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_first_screen_holds_the_two_commands_the_verdict_table_and_the_python_example():
    first = "\n".join(README.read_text(encoding="utf-8").splitlines()[:60])
    assert "polyalign quickstart" in first and "-m pytest" in first
    assert "| method | claim | start | difference | verdict | page |" in first
    assert re.search(r"```python\n.*?```", first, re.S), "the Python example ends after line 60"


@pytest.mark.integration
def test_python_example_aligns_and_embeds(sample_prepared, tmp_path, capsys):
    from polyalign.checkpoint import save_model_folder
    from polyalign.model import EncoderConfig, MaskedLanguageModel
    from polyalign.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(sample_prepared / "tokenizer")
    config = EncoderConfig(
        vocab_size=tokenizer.special.vocab_size, hidden_size=32, num_layers=12, num_heads=2, ffn_size=64
    )
    folder = save_model_folder(tmp_path / "model", MaskedLanguageModel(config), tokenizer, [])
    code = python_block("Python").replace("models/multilingual-e5-small", str(folder))
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["vectors"].shape == (2, 32)
    assert all(0 <= i < 5 and 0 <= j < 5 for i, j in scope["links"][0])
    assert capsys.readouterr().out.startswith("[(")


@pytest.mark.integration
def test_add_an_objective_example_trains_a_step(sample_prepared, tmp_path, monkeypatch):
    from polyalign import objectives
    from polyalign.config import load_recipe
    from polyalign.train import build_run, start_loader
    from tests.conftest import tiny_recipe_overrides

    scope: dict = {}
    exec(compile(python_block("Add an objective"), "README.md", "exec"), scope)
    monkeypatch.setitem(objectives.OBJECTIVES, "norm", scope["MeanNorm"])
    overrides = [*tiny_recipe_overrides(sample_prepared), "trainer.loader_workers=0"]
    recipe = load_recipe("mlm", overrides)
    recipe.objectives = [type(recipe.objectives[0])(name="norm", config={"target": 2.0})]
    torch.manual_seed(0)
    run, _ = build_run(recipe, tmp_path / "run")
    loader = start_loader(run)
    loss, _, _ = run.trained(next(loader).slots[0])
    loader.close()
    loss.backward()
    assert math.isfinite(float(loss.detach()))
    assert run.module.model.encoder.layers[0].feed_forward.up.weight.grad is not None
