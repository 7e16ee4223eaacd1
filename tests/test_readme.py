"""The README is for users: short, the two commands first, a section per job, its links reach their pages and its
claims table copies the lab's notes; its code runs: the Python example (on a tiny model standing in for
multilingual-e5-small) and the "add an objective" example (one training step through the trainer)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"
NOTES = README.parent / "bench" / "results" / "README.md"


def python_block(after_heading: str) -> str:
    """The first ```python block after a `## ` heading."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(f"## {after_heading}") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_is_short_and_opens_with_the_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 220, f"README.md has {len(lines)} lines; the lab's narrative belongs in {NOTES.name}"
    first = "\n".join(lines[:20])
    assert "polyalign quickstart --out runs/quickstart" in first and ".venv/bin/python -m pytest" in first


def test_the_readme_has_one_section_per_job_and_one_claims_table():
    text = README.read_text(encoding="utf-8")
    jobs = ("Better-than-eflomal word alignment", "Pre-train a recipe", "Evaluate", "Python", "Add an objective")
    assert all(f"\n## {job}" in text for job in jobs)
    assert text.count("| claim | start | result | verdict | link |") == 1
    assert "torchrun --nproc_per_node" in text and "<!-- GPU:" in text


def slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", [README, NOTES], ids=lambda p: p.relative_to(README.parent).as_posix())
def test_every_link_of_the_readmes_reaches_a_file_and_its_heading(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name} links {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.*)$", linked.read_text(encoding="utf-8"), re.M)
            assert anchor in {slug(h) for h in headings}, f"{page.name} links {target}: no such heading"


def test_the_claims_table_copies_its_numbers_from_the_lab_notes():
    text = README.read_text(encoding="utf-8")
    table = text[text.index("| claim | start | result | verdict | link |") :].split("\n\n")[0]
    notes = NOTES.read_text(encoding="utf-8")
    rows = [row.split(" | ") for row in table.splitlines()[2:]]
    assert len(rows) >= 20
    for row in rows:
        for number in re.findall(r"\d[\d.,]*\d|\d", row[2]):
            assert number in notes, f"{row[0]}: {number} is on no page"


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
