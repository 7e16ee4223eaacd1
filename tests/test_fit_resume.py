"""`polyalign fit-aligner --resume OUT` finishes what a signal or a kill stopped: training from its checkpoint, then
the interpolation and the links, which are those of a fit that was never stopped; the signal's line names it."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from polyalign.checkpoint import checkpoint_dirs, checkpoint_step
from polyalign.cli import main
from polyalign.io import Terminated
from tests.conftest import SAMPLE

GOLD = SAMPLE / "word_alignment" / "de-en"
SIDES = ["--src", str(GOLD / "src.txt"), "--tgt", str(GOLD / "tgt.txt")]


def run(args: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    lines = capsys.readouterr().err.strip().splitlines()
    return exit_.value.code, lines[-1] if lines else ""  # the last line: the error, or what a signal left


def fit(model: Path, out: Path, capsys) -> tuple[int, str]:
    return run(["fit-aligner", "--model", model, *SIDES, "--out", out, "--steps", 4, "--no-progress",
                "--device", "cpu"], capsys)  # fmt: skip


def signal_at_step(monkeypatch, step: int) -> None:
    """SIGTERM arrives during `step`, as a scheduler's pre-emption would: the guard sees it after the step."""
    from polyalign.train.guard import RunGuard

    asked = RunGuard.stop_requested

    def stop_requested(self, run_):
        if run_.step == step:
            self.signum = signal.SIGTERM
        return asked(self, run_)

    monkeypatch.setattr(RunGuard, "stop_requested", stop_requested)


@pytest.mark.integration
def test_a_fit_stopped_in_training_resumes_to_the_links_of_an_unbroken_fit(tiny_model, tmp_path, monkeypatch, capsys):
    assert fit(tiny_model, tmp_path / "whole", capsys)[0] == 0
    out = tmp_path / "fit"
    signal_at_step(monkeypatch, 2)
    code, err = fit(tiny_model, out, capsys)
    assert code == 128 + signal.SIGTERM
    assert err == f"SIGTERM: self-training kept at step 2; finish the fit with `polyalign fit-aligner --resume {out}`"
    assert not (out / "links.txt").exists() and not (out / "aligner").exists()
    monkeypatch.undo()
    code, err = fit(tiny_model, out, capsys)  # the same command again is told to resume
    assert code == 2 and f"an interrupted fit is there; continue it with `polyalign fit-aligner --resume {out}`" in err
    assert run(["fit-aligner", "--resume", out, "--no-progress", "--device", "cpu"], capsys)[0] == 0
    assert (out / "links.txt").read_text() == (tmp_path / "whole" / "links.txt").read_text()
    report = json.loads((out / "fit.json").read_text())
    assert report["steps"] == 4 and report["pairs"] == len((GOLD / "src.txt").read_text().splitlines())
    metrics = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(m.get("step", 0) for m in metrics) == 4
    # trained on from the interrupt's checkpoint, not again from the start
    assert [checkpoint_step(c) for c in checkpoint_dirs(out / "run")] == [2, 4]


@pytest.mark.integration
def test_a_fit_stopped_while_aligning_resumes_without_training_again(tiny_model, tmp_path, monkeypatch, capsys):
    from polyalign import fit_aligner as module

    out = tmp_path / "fit"
    aligning = module.align_bitext

    def terminated(*args, **kwargs):
        raise Terminated

    monkeypatch.setattr(module, "align_bitext", terminated)
    code, err = fit(tiny_model, out, capsys)
    assert code == 128 + signal.SIGTERM
    assert err == f"SIGTERM: self-training kept at step 4; finish the fit with `polyalign fit-aligner --resume {out}`"
    assert (out / "aligner").is_dir() and not (out / "links.txt").exists()

    def no_training(*args, **kwargs):
        raise AssertionError("trained again although the run had reached its last step")

    monkeypatch.setattr(module, "align_bitext", aligning)
    monkeypatch.setattr(module, "pretrain", no_training)
    monkeypatch.setattr(module, "interpolate_folders", no_training)
    assert run(["fit-aligner", "--resume", out, "--no-progress", "--device", "cpu"], capsys)[0] == 0
    assert len((out / "links.txt").read_text().splitlines()) == len((GOLD / "src.txt").read_text().splitlines())
    code, err = run(["fit-aligner", "--resume", out, "--no-progress"], capsys)  # complete: nothing left to do
    assert code == 0 and "holds a complete fit (fit.json); nothing to resume" in err


def test_resume_takes_its_settings_from_the_folder_and_needs_a_fit_there(tiny_model, tmp_path, capsys):
    code, err = run(["fit-aligner", "--resume", tmp_path / "none"], capsys)
    assert code == 2 and "none: does not exist; --resume takes the --out of a `polyalign fit-aligner`" in err
    (tmp_path / "other").mkdir()
    code, err = run(["fit-aligner", "--resume", tmp_path / "other"], capsys)
    assert code == 2 and "holds no fit-request.json, so no fit to resume" in err
    code, err = run(["fit-aligner", "--resume", tmp_path / "other", "--model", tiny_model, "--lr", "1e-3"], capsys)
    assert code == 2 and "goes on with the settings the fit started with: drop --model, --lr" in err
    (tmp_path / "other" / "fit-request.json").write_text('{"start": 3}')
    code, err = run(["fit-aligner", "--resume", tmp_path / "other"], capsys)
    assert code == 2 and "fit-request.json: damaged (KeyError" in err
    code, err = run(["fit-aligner", "--model", tiny_model, *SIDES], capsys)
    assert code == 2 and "fit-aligner needs --model and --out (or --resume OUT" in err
