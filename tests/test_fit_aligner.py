"""`polyalign fit-aligner`: one command from a start model and a user's bitext to a fitted aligner and its links."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyalign.align.aligner import PROTOCOL_VERSION
from polyalign.align.bitext import Bitext
from polyalign.fit_aligner import FitSettings, default_steps, fit_aligner, self_align_overrides
from polyalign.io import DataError

SAMPLE = Path(__file__).resolve().parents[1] / "polyalign" / "sample_data" / "word_alignment" / "de-en"


def test_one_pass_over_the_bitext_in_16_pair_steps_at_most_the_recipes_1000():
    assert [default_steps(n) for n in (1, 16, 17, 2000, 10**6)] == [1, 1, 2, 125, 1000]


def test_the_schedule_keeps_the_recipes_shape_for_any_number_of_steps():
    sets = dict(s.split("=", 1) for s in self_align_overrides(Path("p"), Path("m"), 125, lr=3e-5))
    assert float(sets["trainer.lr"]) == 3e-5
    assert sets["trainer.stop_at"] == "125" and sets["trainer.max_steps"] == "375"  # 1,000 of 3,000 in the recipe
    assert sets["trainer.warmup_steps"] == "12"


@pytest.mark.integration
def test_fit_aligner_writes_links_for_every_pair_of_a_pairs_file(tiny_model, tmp_path):
    pairs = tmp_path / "de-en.txt"
    source, target = (SAMPLE / "src.txt").read_text().splitlines(), (SAMPLE / "tgt.txt").read_text().splitlines()
    pairs.write_text("".join(f"{s} ||| {t}\n" for s, t in zip(source, target, strict=True)))
    report = fit_aligner(tiny_model, Bitext(pairs), tmp_path / "fit", FitSettings(steps=2, progress=False))
    links = (tmp_path / "fit" / "links.txt").read_text().splitlines()
    assert len(links) == len(source) and report["pairs"] == len(source)
    assert all(all("-" in link for link in line.split()) for line in links)
    assert json.loads((tmp_path / "fit" / "fit.json").read_text())["steps"] == 2
    assert (tmp_path / "fit" / "aligner" / "model.safetensors").is_file()
    assert not (tmp_path / "fit" / "bitext").exists()  # the temporary copy of the user's text is gone


def test_bad_input_is_one_line_before_anything_is_written(tiny_model, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("ein Haus ||| a house\nkein Trenner hier\n")
    with pytest.raises(DataError, match=r"bad.txt:2"):
        fit_aligner(tiny_model, Bitext(bad), tmp_path / "fit", FitSettings(progress=False))
    with pytest.raises(DataError, match="language code"):
        fit_aligner(tiny_model, Bitext(bad), tmp_path / "fit", FitSettings(src_lang="German", progress=False))
    assert not (tmp_path / "fit").exists()


@pytest.mark.integration
def test_the_cli_fits_and_aligns_two_files_and_refuses_bad_steps(tiny_model, tmp_path, capsys):
    from polyalign.cli import main

    sides = ["--src", str(SAMPLE / "src.txt"), "--tgt", str(SAMPLE / "tgt.txt")]
    args = ["fit-aligner", "--model", str(tiny_model), *sides]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--out", str(tmp_path / "bad"), "--steps", "0"])
    assert exit_.value.code == 2 and not (tmp_path / "bad").exists()
    told = ["--layer", "1", "--weight", "0.25", "--lr", "1e-4", "--device", "cpu", "--batch-tokens", "512"]
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--out", str(tmp_path / "fit"), "--steps", "1", "--no-progress", *told])
    assert exit_.value.code == 0
    lines = (tmp_path / "fit" / "links.txt").read_text().splitlines()
    assert len(lines) == len((SAMPLE / "src.txt").read_text().splitlines())
    report = json.loads((tmp_path / "fit" / "fit.json").read_text())
    assert (report["layer"], report["weight"], report["lr"]) == (1, 0.25, 1e-4)
    assert report["protocol_version"] == PROTOCOL_VERSION
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:  # the aligner's folder reads as fit-aligner read it: no flags needed
        main(["align", "--model", str(tmp_path / "fit" / "aligner"), *sides, "--no-progress"])
    assert capsys.readouterr().out.splitlines() == lines


BAD_SETTINGS = {
    "--layer 99": (["--layer", "99"], "--layer 99: the model has layers 0..2"),
    "--lr 0": (["--lr", "0"], "--lr 0.0: give a positive learning rate"),
    "--weight 1.5": (["--weight", "1.5"], "--weight 1.5: give a weight in [0, 1]"),
    "--softmax-threshold 1": (["--softmax-threshold", "1"], "--softmax-threshold 1.0: use a probability in [0, 1)"),
    "--device": (["--device", "gpu7"], "--device gpu7: not a torch device"),
}


@pytest.mark.parametrize("case", list(BAD_SETTINGS))
def test_a_bad_setting_is_one_line_exit_2_before_any_work(case, tiny_model, tmp_path, capsys, monkeypatch):
    from polyalign import fit_aligner as module
    from polyalign.cli import main

    def no_work(*args, **kwargs):
        raise AssertionError("prepared the bitext before checking every setting")

    monkeypatch.setattr(module, "run_prepare", no_work)
    flags, message = BAD_SETTINGS[case]
    with pytest.raises(SystemExit) as exit_:
        main(["fit-aligner", "--model", str(tiny_model), "--pairs", str(tmp_path / "x"), "--out", str(tmp_path / "fit"),
              *flags])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err.count("\n") == 0 and message in err, err
    assert not (tmp_path / "fit").exists()


def test_the_help_lists_the_controls_the_other_commands_have():
    import typer

    from polyalign.cli import app

    params = {p.name for p in typer.main.get_command(app).commands["fit-aligner"].params}
    controls = {
        "device",
        "batch_tokens",
        "lr",
        "weight",
        "method",
        "softmax_threshold",
        "layer",
        "encoding",
        "tokenize",
    }
    assert controls <= params
