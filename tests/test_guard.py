"""Nothing a user writes crashes a command: a recipe in another encoding, sizes that do not fit together, a damaged
shard, a --run-dir that is a file or a folder of someone's files, a folder nobody may write, a full disk while a
checkpoint is written, a loss that turns NaN all end in one line and exit code 2 that say what was kept and what
continues. A run folder is held by one process; `prepare` removes what a killed `prepare` left."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

import pytest

from polyalign.cli import main
from polyalign.io import DataError, FolderLock
from tests.conftest import tiny_recipe_overrides

RECIPE = "model:\n  hidden_size: 32\n  num_heads: 4\nobjectives:\n  - name: mlm\n"


def _sets(prepared: Path, steps: int = 2, *extra: str) -> list[str]:
    return [a for o in [*tiny_recipe_overrides(prepared, steps), *extra] for a in ("--set", o)]


def _run(args: list[str], capsys) -> tuple[int, str]:
    """The CLI in this process: its exit code and what it wrote to stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    return exit_info.value.code, capsys.readouterr().err.strip()


def _one_line_exit_2(code: int, err: str, expected: str) -> None:
    assert code == 2, err
    assert "\n" not in " ".join(err.split("\n ")) and "Traceback" not in err, err  # one line (rich may wrap)
    flat = " ".join(err.split())
    assert flat.startswith("error: ") and expected in flat, flat


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ---------------------------------------------------------------------------------------------------------
# Recipes: checked before anything is created


RECIPE_CASES = {  # case -> (the recipe file's bytes, what the one line says)
    "Latin-1 recipe": (
        RECIPE.encode() + "# café\n".encode("latin-1"),
        "bad.yaml:6: not UTF-8 text (byte 0xe9); save the file as UTF-8",
    ),
    "num_heads 0": (RECIPE.replace("num_heads: 4", "num_heads: 0").encode(), "bad.yaml:1: model: num_heads=0: must be"),
    "hidden_size -32": (
        RECIPE.replace("hidden_size: 32", "hidden_size: -32").encode(),
        "bad.yaml:1: model: hidden_size=-32: must be at least 1",
    ),
    "max_positions 8 with max_length 30": (
        RECIPE.replace("num_heads: 4", "num_heads: 4\n  max_positions: 8").encode()
        + b"data:\n  mono: {max_length: 30}\n",
        "bad.yaml:4: model.max_positions: 8 is shorter than the longest row the data can give, 32 = "
        "data.mono.max_length=30 + 2 special tokens (mlm); set model.max_positions to at least 32",
    ),
}


@pytest.mark.parametrize("case", list(RECIPE_CASES))
def test_a_bad_recipe_is_one_line_exit_2_naming_the_line_and_creates_nothing(case, tmp_path, capsys):
    text, expected = RECIPE_CASES[case]
    recipe = tmp_path / "bad.yaml"
    recipe.write_bytes(text)
    before = _files(tmp_path)
    code, err = _run(["pretrain", str(recipe), "--data", str(tmp_path), "--run-dir", str(tmp_path / "run")], capsys)
    _one_line_exit_2(code, err, expected)
    assert _files(tmp_path) == before


SHORT = ["data.mono.max_length=30", "data.parallel.max_length=30"]


def test_model_sizes_are_checked_together_in_the_recipe_check():
    from polyalign.config import load_recipe

    for sets, expected in [
        (["model.num_heads=0"], "--set model.num_heads=0: model: num_heads=0: must be at least 1"),
        (["model.hidden_size=-32"], "model: hidden_size=-32: must be at least 1"),
        (["model.hidden_size=30", "model.num_heads=4"], "hidden_size=30 is not divisible by num_heads=4"),
        (["model.max_positions=31", "data.mono.max_length=30"], "longest row the data can give, 32"),
        # TLM in PPA's layout runs positions on across the pair: 2 x 30 + 3
        (
            ["model.max_positions=62", *SHORT, "objectives.1.config.style=ppa"],
            "longest row the data can give, 63 = 2 x data.parallel.max_length=30 + 3 special tokens (tlm, ppa)",
        ),
    ]:
        recipe = "xlm" if any("objectives.1" in s for s in sets) else "mlm"
        with pytest.raises(DataError, match=re.escape(expected)):
            load_recipe(recipe, sets)
    # exactly covered: accepted; a relative position bias has no table to cover
    load_recipe("mlm", ["model.max_positions=32", "data.mono.max_length=30"])
    load_recipe("xlm", ["model.max_positions=63", *SHORT, "objectives.1.config.style=ppa"])
    load_recipe("xlm", ["model.max_positions=32", *SHORT])  # XLM's TLM restarts positions at the second side
    load_recipe("xlm-e-mono", ["model.max_positions=8", "data.mono.max_length=30"])


# ---------------------------------------------------------------------------------------------------------
# Run folders


def test_run_dir_naming_a_file_or_a_folder_of_user_files_is_refused_and_left_alone(sample_prepared, tmp_path, capsys):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    code, err = _run(["pretrain", "mlm", "--run-dir", str(a_file), "--no-progress", *_sets(sample_prepared)], capsys)
    _one_line_exit_2(code, err, "notes.txt: a file, not a folder; --run-dir names the run's folder")
    assert a_file.read_text() == "mine"

    users = tmp_path / "experiments"
    users.mkdir()
    (users / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0}\n')
    for resume in ([], ["--resume"]):
        code, err = _run(["pretrain", "mlm", "--run-dir", str(users), *resume, *_sets(sample_prepared)], capsys)
        expected = "holds no run to resume" if resume else "holds files that are not a polyalign run (metrics.jsonl)"
        _one_line_exit_2(code, err, expected)
    assert _files(users) == ["metrics.jsonl"] and (users / "metrics.jsonl").read_text() == '{"step": 1, "loss": 3.0}\n'


def _unwritable(folder: Path, monkeypatch) -> None:
    """`folder` as a folder nobody may write into: by its mode, or (as root, whom modes do not stop) by an
    os.mkdir that fails there as the kernel would."""
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if Path(path).parent == folder:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)


def test_a_read_only_parent_folder_is_one_line_for_pretrain_and_export(
    tiny_model, sample_prepared, tmp_path, capsys, monkeypatch
):
    locked = tmp_path / "locked"
    _unwritable(locked, monkeypatch)
    args = ["pretrain", "mlm", "--run-dir", str(locked / "run"), "--no-progress", *_sets(sample_prepared)]
    code, err = _run(args, capsys)
    _one_line_exit_2(code, err, "locked/run: cannot create the run folder (Permission denied)")
    export = ["export", "--model", str(tiny_model), "--out", str(locked / "hf"), "--languages-as-token-types"]
    code, err = _run(export, capsys)
    _one_line_exit_2(code, err, "Permission denied; choose a path you can write")
    assert _files(locked) == []


def test_a_cut_shard_is_one_line_and_leaves_no_run_folder(sample_prepared, tmp_path, capsys):
    prepared = tmp_path / "prepared"
    shutil.copytree(sample_prepared, prepared)
    ids = sorted((prepared / "mono").glob("*.ids"))[0]
    ids.write_bytes(ids.read_bytes()[: ids.stat().st_size // 2])
    run = tmp_path / "run"
    code, err = _run(["pretrain", "mlm", "--run-dir", str(run), "--no-progress", *_sets(prepared)], capsys)
    _one_line_exit_2(code, err, f"{ids.name}: damaged (")
    assert "prepare the corpus again" in " ".join(err.split())
    assert not run.exists()  # a fresh run that failed before its first checkpoint does not block the next try


def test_a_folder_lock_has_one_holder_names_it_and_a_dead_holders_lock_is_taken(tmp_path):
    path = tmp_path / ".lock"
    first = FolderLock(path, "busy: pid {pid}")
    with pytest.raises(DataError, match=f"busy: pid {os.getpid()}"):
        FolderLock(path, "busy: pid {pid}")
    first.release()
    assert not path.exists()
    path.write_text("999999\n")  # left by a killed holder: flock went with it
    again = FolderLock(path, "busy: pid {pid}")
    assert path.read_text() == f"{os.getpid()}\n"
    again.release()


# ---------------------------------------------------------------------------------------------------------
# prepare cleans up after itself, and after a prepare killed before it


def _prepare(out: Path, *extra: str) -> list[str]:
    from tests.conftest import SAMPLE

    return [
        "prepare",
        "--mono",
        str(SAMPLE / "mono"),
        "--out",
        str(out),
        "--vocab-size",
        "1000",
        "--workers",
        "1",
        "--no-progress",
        *extra,
    ]


def test_prepare_that_fails_leaves_nothing_beside_out_or_under_tmpdir(tmp_path, capsys, monkeypatch):
    import tempfile

    import polyalign.data.prepare as prep

    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)

    def full_disk(text, folder, vocab_size):
        assert text.is_file()  # the sampled text exists while the tokenizer trains...
        raise OSError(errno.ENOSPC, "No space left on device", str(folder))

    monkeypatch.setattr(prep, "train_sentencepiece", full_disk)
    code, err = _run(_prepare(tmp_path / "out"), capsys)
    _one_line_exit_2(code, err, "No space left on device; free some space or choose another disk")
    assert _files(tmp_path) == ["tmpdir"] and _files(scratch) == []  # ...and nowhere once it failed


def test_prepare_removes_what_a_killed_prepare_left_and_refuses_a_live_one(tmp_path, capsys):
    out = tmp_path / "out"
    left = tmp_path / ".out.tmp-k1lled"  # what SIGKILL leaves mid-way: the half-built folder, tokenizer text in it
    left.mkdir()
    (left / ".tokenizer_text.txt").write_text("sampled text\n")
    other = tmp_path / ".other.tmp-abc"  # another output's: not ours to touch
    other.mkdir()
    live = FolderLock(tmp_path / ".out.lock", "held by {pid}")
    code, err = _run(_prepare(out), capsys)
    _one_line_exit_2(code, err, f"another `polyalign prepare` (pid {os.getpid()}) is writing it")
    assert left.is_dir()  # a live prepare's folder is not removed
    live.release()
    with pytest.raises(SystemExit) as done:
        main(_prepare(out))
    assert done.value.code == 0
    assert "removed the half-written .out.tmp-k1lled" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.tmp-abc", "out"]
    assert not list(out.rglob(".tokenizer_text.txt"))


def test_a_cut_gzip_input_and_a_file_in_the_out_path_are_one_line(tmp_path, capsys):
    import gzip

    from tests.conftest import SAMPLE

    mono = tmp_path / "mono"
    mono.mkdir()
    whole = gzip.compress((SAMPLE / "mono" / "de.txt").read_bytes()[:4000])
    (mono / "de.txt.gz").write_bytes(whole[: len(whole) // 2])
    code, err = _run(_prepare(tmp_path / "out")[:2] + [str(mono)] + _prepare(tmp_path / "out")[3:], capsys)
    _one_line_exit_2(code, err, "an input file ends early")
    (tmp_path / "a-file").write_text("mine")
    code, err = _run(_prepare(tmp_path / "a-file" / "out"), capsys)
    _one_line_exit_2(code, err, "a-file: File exists; a file is there where a folder is needed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "mono"]


@pytest.mark.integration
def test_sigterm_stops_prepare_with_one_line_and_leaves_nothing(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "polyalign.cli", *_prepare(out)[:-1], "--tokenizer-sample-lines", "100000"],
        cwd=Path(__file__).resolve().parents[1],
        stderr=subprocess.PIPE,
        text=True,
    )
    # the half-built folder, early on (its tokenizer text is there from sampling until the tokenizer is trained)
    while proc.poll() is None and not list(tmp_path.glob(".out.tmp-*/.tokenizer_text.txt")):
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    # a progress bar may close after the line (its own last refresh), so the line is looked for, not last
    assert proc.returncode == 128 + signal.SIGTERM and "terminated" in err.splitlines() and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_pretrain_into_a_folder_another_process_holds_is_refused_and_changes_nothing(sample_prepared, tmp_path, capsys):
    from polyalign.train.guard import LOCK_FILE

    run = tmp_path / "run"
    run.mkdir()
    holder = FolderLock(run / LOCK_FILE, "held by {pid}")  # as a run that is still building its model holds it
    try:
        for resume in ([], ["--resume"]):
            args = ["pretrain", "mlm", "--run-dir", str(run), "--no-progress", *resume, *_sets(sample_prepared)]
            code, err = _run(args, capsys)
            expected = "holds no run to resume" if resume else f"another process (pid {os.getpid()}) trains in this"
            _one_line_exit_2(code, err, expected)
        assert _files(run) == [LOCK_FILE]
    finally:
        holder.release()


def test_an_error_line_prints_the_users_words_as_written(capsys):
    # rich would read `[...]` as markup and `:x:` as an emoji; a path or a value must come out unchanged
    from polyalign.cli import _fail

    with pytest.raises(SystemExit) as exit_info:
        _fail("--device tpu:x: [default: ot] is not a device")
    assert exit_info.value.code == 2
    assert "tpu:x: [default: ot] is not a device" in capsys.readouterr().err
