"""A model folder's own alignment reading (alignment.json): the default of `align`, `fit-aligner` and the Python
`Aligner`, passed on by `interpolate`, refused in one line when malformed, and for multilingual-e5-small the setting
the e5 study offers."""

import json
import shutil
from pathlib import Path

import pytest

from polyalign.align.aligner import Aligner
from polyalign.align.reading import FILE, Reading, read_reading, write_reading
from polyalign.checkpoint import load_model
from polyalign.cli import main
from polyalign.io import DataError
from polyalign.model_folders import E5_READING, interpolate_folders

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [
    tuple(side.split() for side in pair)
    for pair in (
        ("Der Hund schläft heute im Garten .", "The dog sleeps in the garden today ."),
        ("Das ist ein kleiner Test .", "This is a small test ."),
        ("Ein zweiter Satz , bitte .", "A second sentence , please ."),
    )
]
OWN = Reading("softmax", 1, 0.05, chosen_by="a test")


@pytest.fixture
def read_model(tiny_model, tmp_path):
    """A copy of the tiny model whose folder says: softmax at 0.05, layer 1."""
    folder = tmp_path / "read-model"
    shutil.copytree(tiny_model, folder)
    write_reading(folder, OWN)
    return folder


def test_a_folders_reading_is_the_python_aligners_default(read_model, tiny_model):
    aligner = Aligner(load_model(read_model))
    assert (aligner.default_method, aligner.default_layer, aligner.softmax_threshold) == ("softmax", 1, 0.05)
    explicit = Aligner(load_model(tiny_model), softmax_threshold=0.05).align(PAIRS, "softmax", 1)
    assert aligner.align(PAIRS) == explicit and sum(map(len, explicit)) > 0
    generic = Aligner(load_model(tiny_model))
    assert (generic.default_method, generic.softmax_threshold) == ("argmax", 1e-3)
    assert generic.default_layer == 2  # two thirds of the tiny model's 3 layers
    assert Aligner(load_model(read_model)).align(PAIRS, "argmax", 2) == generic.align(PAIRS)  # flags still win


def test_the_cli_reads_the_folder_and_says_so(read_model, tiny_model, tmp_path, capsys):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("".join(f"{' '.join(s)} ||| {' '.join(t)}\n" for s, t in PAIRS), encoding="utf-8")

    def links(*args):
        with pytest.raises(SystemExit) as exit_info:
            main(["align", "--pairs", str(pairs), "--no-progress", *args])
        out, err = capsys.readouterr()
        assert exit_info.value.code == 0, err
        return out, err

    by_default, err = links("--model", str(read_model))
    assert "softmax at 0.05, layer 1" in err and "a test" in err
    told, _ = links("--model", str(tiny_model), "--method", "softmax", "--softmax-threshold", "0.05", "--layer", "1")
    assert by_default == told


def test_interpolate_passes_the_starts_reading_on(read_model, tiny_model, tmp_path):
    out = interpolate_folders(read_model, tiny_model, 0.5, tmp_path / "wise")
    assert read_reading(out) == OWN
    assert read_reading(interpolate_folders(tiny_model, read_model, 0.5, tmp_path / "other")) == Reading()


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not JSON"),
        ('{"method": "best"}', "method 'best'"),
        ('{"layer": -1}', "layer -1"),
        ('{"softmax_threshold": 2}', "softmax_threshold 2"),
        ('{"treshold": 0.1}', "unknown key 'treshold'"),
        ("[1, 2]", "expected an object"),
    ],
)
def test_a_bad_reading_is_one_line_naming_the_file(read_model, content, message):
    (read_model / FILE).write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message) as error:
        read_reading(read_model)
    assert str(read_model / FILE) in str(error.value) and "\n" not in str(error.value)


def test_a_layer_past_the_model_is_refused_when_read(read_model):
    write_reading(read_model, Reading("argmax", 9))
    with pytest.raises(DataError, match="layer 9"):
        _ = Aligner(load_model(read_model)).default_layer


def test_e5s_reading_is_the_aligner_the_e5_study_offers():
    summary = json.loads((ROOT / "bench/results/e5_summary.json").read_text(encoding="utf-8"))
    threshold = f"-{E5_READING.softmax_threshold:g}" if E5_READING.method == "softmax" else ""
    assert (summary["layer"], summary["method"]) == (E5_READING.layer, E5_READING.method + threshold)


GOLD = ROOT / "polyalign" / "sample_data" / "word_alignment" / "de-en"


def cli(args: list[str], capsys) -> str:
    """Run `polyalign ARGS` through the real entry point; its stderr (a non-zero exit fails)."""
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--no-progress"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 0, err
    return err


@pytest.mark.parametrize("flags", [[], ["--method", "argmax", "--layer", "2"], ["--softmax-threshold", "0.2"]])
def test_evaluate_scores_the_links_align_writes_at_the_same_flags(read_model, tmp_path, capsys, flags):
    from polyalign.align.aer import alignment_error_rate, read_gold
    from polyalign.align.words import parse_pharaoh

    links = tmp_path / "links.txt"
    sides = ["--src", str(GOLD / "src.txt"), "--tgt", str(GOLD / "tgt.txt"), "--src-lang", "de", "--tgt-lang", "en"]
    said_by_align = cli(["align", "--model", str(read_model), *sides, "--out", str(links), *flags], capsys)
    gold = read_gold(GOLD)
    expected = alignment_error_rate(
        [parse_pharaoh(x) for x in links.read_text().splitlines()], gold.sure, gold.possible
    )
    said = cli(["evaluate", "alignment", "--model", str(read_model), "--gold", str(GOLD), "--out", str(tmp_path / "r"),
                *flags], capsys)  # fmt: skip
    scored = json.loads((tmp_path / "r" / "alignment.json").read_text(encoding="utf-8"))
    assert (scored["aer"], scored["precision"], scored["recall"]) == pytest.approx(
        (expected.aer, expected.precision, expected.recall), abs=0.006
    )  # the JSON rounds to 2 decimals
    reading = said_by_align.split("align: ")[1].split(";")[0]
    assert f"evaluate alignment: {reading};" in said  # both print the one reading they used
    if not flags:
        assert "softmax at 0.05, layer 1, separate encoding" in reading  # the folder's own


def test_a_call_with_another_method_leaves_the_aligner_as_it_was(read_model):
    aligner = Aligner(load_model(read_model))
    before = aligner.reading
    ot = aligner.align(PAIRS, "ot", 2)
    assert aligner.reading == before and aligner.encoding == "separate"
    assert aligner.align(PAIRS) == Aligner(load_model(read_model)).align(PAIRS)
    assert ot == Aligner(load_model(read_model), method="ot", layer=2).align(PAIRS)  # read with pair encoding
    other = aligner.reading_as(softmax_threshold=0.3)  # as the bench scores several thresholds on one model
    assert (other.softmax_threshold, aligner.softmax_threshold) == (0.3, 0.05) and other.model is aligner.model


def test_resolution_order_flags_then_folder_then_fallback(read_model, tiny_model):
    from polyalign.align.reading import ReadingFlags, resolve_reading

    assert resolve_reading(read_model, 3) == Reading(
        "softmax", 1, 0.05, "separate", "the folder's alignment.json: a test"
    )
    told = resolve_reading(read_model, 3, ReadingFlags(method="ot", softmax_threshold=0.3))
    assert (told.method, told.layer, told.softmax_threshold, told.encoding) == ("ot", 1, 0.3, "pair")
    assert "--method ot" in told.chosen_by and "a test" in told.chosen_by
    fallback = resolve_reading(tiny_model, 3)
    generic = ("argmax", 2, 1e-3, "separate")
    assert (fallback.method, fallback.layer, fallback.softmax_threshold, fallback.encoding) == generic
    with pytest.raises(DataError, match="--layer 4: the model has layers 0..3"):
        resolve_reading(read_model, 3, ReadingFlags(layer=4))
