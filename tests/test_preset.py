"""Presets: a partial recipe merged over any recipe before the --set overrides, never touching objectives."""

import pytest
import yaml

from polyalign import config
from polyalign.config import load_recipe
from polyalign.io import DataError


@pytest.fixture
def presets(tmp_path, monkeypatch):
    """A presets folder of our own: `size` sets a model size, a nested stream budget and the lr."""
    folder = tmp_path / "presets"
    folder.mkdir()
    (folder / "size.yaml").write_text(
        "model: {hidden_size: 64, num_layers: 2, num_heads: 2, ffn_size: 128}\n"
        "data:\n  mono: {max_tokens: 1024}\n"
        "trainer: {lr: 3.0e-3}\n"
    )
    monkeypatch.setattr(config, "PRESETS_DIR", folder)
    return folder


def test_preset_values_are_merged_into_only_the_keys_it_names(presets):
    plain, sized = load_recipe("xlm"), load_recipe("xlm", preset="size")
    assert sized.model == plain.model | {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "ffn_size": 128}
    assert sized.data.mono.max_tokens == 1024 and sized.trainer.lr == 3e-3
    # deep merge: the stream's other keys and the other stream stay the recipe's
    assert sized.data.mono.max_length == plain.data.mono.max_length and sized.data.parallel == plain.data.parallel
    assert sized.objectives == plain.objectives and sized.trainer.warmup_steps == plain.trainer.warmup_steps


def test_set_beats_the_preset(presets):
    recipe = load_recipe("xlm", ["trainer.lr=7e-4", "model.num_layers=3"], preset="size")
    assert recipe.trainer.lr == 7e-4 and recipe.model["num_layers"] == 3 and recipe.model["hidden_size"] == 64


def test_a_preset_may_not_change_objectives(presets):
    (presets / "objectives.yaml").write_text("objectives: [{name: mlm}]\n")
    with pytest.raises(DataError, match="preset objectives: objectives: a preset sets only model, data, trainer"):
        load_recipe("xlm", preset="objectives")


def test_a_bad_preset_key_is_reported_at_the_preset(presets):
    (presets / "bad.yaml").write_text("trainer:\n  lr: 1.0e-3\n  warmup: 30\n")
    with pytest.raises(DataError) as err:
        load_recipe("xlm", preset="bad")
    message = str(err.value)
    assert message.startswith(f"preset bad ({presets / 'bad.yaml'}:3): trainer.warmup: unknown key")
    # a --set of the same key is what the error names
    with pytest.raises(DataError, match=r"^--set trainer.lr=-1: trainer: lr=-1"):
        load_recipe("xlm", ["trainer.lr=-1"], preset="size")


def test_saved_run_recipe_holds_the_preset_values(presets, tmp_path):
    """`pretrain` saves recipe.to_dict(); --resume reads it back without the preset."""
    recipe = load_recipe("xlm", preset="size")
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe.to_dict(), sort_keys=False))
    again = load_recipe(tmp_path / "recipe.yaml")
    assert again.model["hidden_size"] == 64 and again.trainer.lr == 3e-3 and again.data.mono.max_tokens == 1024


def test_unknown_preset_is_one_line_and_exit_code_2(tmp_path, capsys):
    from polyalign.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["pretrain", "xlm", "--run-dir", str(tmp_path / "run"), "--preset", "nope", "--no-progress"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.strip()]
    assert errors == ["error: preset 'nope' not found; built-in presets: cpu-small"], err


def test_built_in_presets_load_over_every_built_in_recipe():
    for preset in sorted(p.stem for p in config.PRESETS_DIR.glob("*.yaml")):
        for recipe in sorted(p.stem for p in config.RECIPES_DIR.glob("*.yaml")):
            load_recipe(recipe, ["init_from=x"], preset=preset)
