"""`polyalign align` on a user's bitext: both input forms, --out, link probabilities, word pairs, the recommended
defaults, and every bad input failing loudly (one line, exit 2, nothing written)."""

import inspect

import pytest
import typer

from polyalign.align.aligner import Aligner
from polyalign.checkpoint import load_model
from polyalign.cli import app, main

SOURCE = ["Der Hund schläft .", "Ja", "Nur", "Das ist ein ☃ Test .", "Ein zweiter Satz , bitte ."]
TARGET = ["The dog sleeps .", "Yes", "Only", "This is a test .", "A second sentence , please ."]


def run_align(args: list[str], capsys) -> tuple[str, str]:
    """`polyalign align ARGS` through the real entry point: (stdout, stderr); a SystemExit other than 0 fails."""
    with pytest.raises(SystemExit) as exit_info:
        main(["align", *args, "--no-progress"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0, err
    return out, err


def fails(args: list[str], capsys, tmp_path) -> str:
    """The one-line error of a refused `polyalign align` (exit 2); the folder it ran in is left as it was."""
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SystemExit) as exit_info:
        main(["align", *args, "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, not even a temporary file
    return err


@pytest.fixture
def bitext(tmp_path):
    src, tgt, pairs = tmp_path / "src.txt", tmp_path / "tgt.txt", tmp_path / "pairs.txt"
    src.write_text("".join(line + "\n" for line in SOURCE), encoding="utf-8")
    tgt.write_text("".join(line + "\n" for line in TARGET), encoding="utf-8")
    pairs.write_text("".join(f"{s} ||| {t}\n" for s, t in zip(SOURCE, TARGET, strict=True)), encoding="utf-8")
    return src, tgt, pairs


def expected_links(model, with_probabilities=False):
    pairs = [(s.split(), t.split()) for s, t in zip(SOURCE, TARGET, strict=True)]
    return Aligner(load_model(model)).align(pairs, with_probabilities=with_probabilities)


def test_one_pairs_file_gives_the_links_of_two_files(tiny_model, bitext, capsys):
    src, tgt, pairs = bitext
    model = ["--model", str(tiny_model)]
    two_files, _ = run_align([*model, "--src", str(src), "--tgt", str(tgt)], capsys)
    one_file, _ = run_align([*model, "--pairs", str(pairs)], capsys)
    only_input, _ = run_align([*model, "--src", str(pairs)], capsys)  # one input given: `source ||| target`
    expected = [" ".join(f"{i}-{j}" for i, j in links) for links in expected_links(tiny_model)]
    assert two_files.splitlines() == one_file.splitlines() == only_input.splitlines() == expected
    assert sum(map(len, expected_links(tiny_model))) > 0


def test_out_probabilities_and_word_pairs_line_up_with_the_links(tiny_model, bitext, tmp_path, capsys):
    _, _, pairs = bitext
    out, prob, words = tmp_path / "links.txt", tmp_path / "links.prob", tmp_path / "links.words"
    args = ["--model", str(tiny_model), "--pairs", str(pairs), "--out", str(out)]
    stdout, _ = run_align([*args, "--output-prob", str(prob), "--output-words", str(words)], capsys)
    assert stdout == ""  # the links went to --out
    found = expected_links(tiny_model, with_probabilities=True)
    assert out.read_text().splitlines() == [" ".join(f"{i}-{j}" for i, j in links) for links, _ in found]
    prob_lines, word_lines = prob.read_text().splitlines(), words.read_text().splitlines()
    assert len(prob_lines) == len(word_lines) == len(SOURCE)
    for (links, expected), prob_line, word_line, s, t in zip(
        found, prob_lines, word_lines, SOURCE, TARGET, strict=True
    ):
        assert [float(p) for p in prob_line.split()] == pytest.approx(expected, abs=1e-3)
        assert all(0 < p <= 1 for p in expected) and len(expected) == len(links)
        assert word_line.split() == [f"{s.split()[i]}<sep>{t.split()[j]}" for i, j in links]


def test_the_recommended_setting_is_the_default_of_the_cli_the_python_aligner_and_the_readme():
    from pathlib import Path

    from polyalign.model_folders import E5_READING

    command = typer.main.get_command(app).commands["align"]
    cli_default = next(p.default for p in command.params if p.name == "method")
    assert cli_default is None and inspect.signature(Aligner.align).parameters["method"].default is None  # the folder's
    assert next(p.default for p in command.params if p.name == "encoding") is None  # the method's own: separate
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Better-than-eflomal word alignment") :].split("\n## ")[0]
    align_line = next(line for line in section.splitlines() if "polyalign align " in line)
    assert "--method" not in align_line and "--encoding" not in align_line  # the defaults are the recommendation
    setting = f"{E5_READING.method} at {E5_READING.softmax_threshold:g} on layer {E5_READING.layer}"
    assert setting in section and "alignment.json" in section and "separate" in section


def test_the_python_aligner_uses_each_methods_own_encoding_unless_told(tiny_model):
    loaded = load_model(tiny_model)
    aligner = Aligner(loaded)
    pairs = [(s.split(), t.split()) for s, t in zip(SOURCE, TARGET, strict=True)]
    reading = aligner.reading
    for method, encoding in (("ot", "pair"), ("argmax", "separate"), ("softmax", "separate")):
        assert aligner.align(pairs, method, 1) == Aligner(loaded, encoding).align(pairs, method, 1), method
        assert aligner.reading == reading and aligner.encoding == "separate"  # a call leaves the aligner as it was
    # (the check above can fail: the two encodings give `ot` different links here)
    assert Aligner(loaded, "separate").align(pairs, "ot", 1) != Aligner(loaded, "pair").align(pairs, "ot", 1)


@pytest.mark.parametrize(
    "pairs",
    [
        [("Der Hund schläft .", "The dog sleeps .")],  # sentences, not word lists
        [(["Der", "Hund"], "The dog")],  # one side a string
        ["Der Hund ||| The dog"],  # a `|||` line, not a pair
    ],
)
def test_strings_where_word_lists_belong_are_refused(tiny_model, pairs):
    with pytest.raises(TypeError, match=r"pair 0: .*(words|source words, target words)"):
        Aligner(load_model(tiny_model)).align(pairs)


def test_a_pair_past_the_positions_is_named_with_its_unaligned_words(tiny_model, tmp_path, capsys):
    # The tiny model has 128 positions: <s> x </s> leaves 126 tokens; "a" is one piece, so of 200 words the
    # last 74 cannot be linked, and the note says so for line 2.
    loaded = load_model(tiny_model)
    ((ids, _),) = loaded.tokenizer.encode_words([["a"] * 3])
    assert len(ids) == 3 and loaded.model.config.max_positions == 128
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("a b ||| a b\n" + " ".join(["a"] * 200) + " ||| a a\n", encoding="utf-8")
    out, err = run_align(["--model", str(tiny_model), "--pairs", str(pairs)], capsys)
    assert f"{pairs}:2: past the model's 128 positions, 74 of 200 source and 0 of 2 target words" in err
    assert f"{pairs}:1" not in err
    assert all(int(link.split("-")[0]) < 126 for link in out.splitlines()[1].split())


BAD_INPUTS = {
    "`|||` in a two-file input": (
        lambda src, tgt, pairs: ["--src", str(pairs), "--tgt", str(tgt)],
        "pairs.txt:1: holds `|||`, but --src and --tgt are one side each",
    ),
    "the same file as --src and --tgt": (
        lambda src, tgt, pairs: ["--src", str(src), "--tgt", str(src)],
        "--src and --tgt are the same file",
    ),
    "line counts differ": (
        lambda src, tgt, pairs: ["--src", str(src), "--tgt", str(short(tgt))],
        "src.txt has 5 lines but ",
    ),
    "a pairs line without `|||`": (
        lambda src, tgt, pairs: ["--pairs", str(src)],
        "src.txt:1: expected `source ||| target`, found no ` ||| `",
    ),
    "--pairs with --src": (
        lambda src, tgt, pairs: ["--pairs", str(pairs), "--src", str(src)],
        "holds both sides: drop --src/--tgt, or drop --pairs",
    ),
    "no input": (lambda src, tgt, pairs: [], "give --src and --tgt"),
    "--out an existing file": (
        lambda src, tgt, pairs: ["--pairs", str(pairs), "--out", str(tgt)],
        "tgt.txt: already exists; choose another path or remove it yourself",
    ),
    "--out the input": (
        lambda src, tgt, pairs: ["--pairs", str(pairs), "--out", str(pairs)],
        "--out " + "{pairs}: is also an input",
    ),
    "--output-prob the same file as --out": (
        lambda src, tgt, pairs: ["--pairs", str(pairs), "--out", str(src.with_name("o")), "--output-prob", "o"],
        "--output-prob o: is also --out",
    ),
    "--softmax-threshold 1": (
        lambda src, tgt, pairs: ["--pairs", str(pairs), "--method", "softmax", "--softmax-threshold", "1"],
        "--softmax-threshold 1.0: use a probability in [0, 1)",
    ),
}


EMPTY_SIDES = {
    "an empty line in --src": (
        lambda src, tgt, pairs: ["--src", str(emptied(src, 3)), "--tgt", str(tgt)],
        ("empty-src.txt:3 (an empty line)",),
    ),
    "an empty line in --tgt": (
        lambda src, tgt, pairs: ["--src", str(src), "--tgt", str(emptied(tgt, 3))],
        ("empty-tgt.txt:3 (an empty line)",),
    ),
    "an empty line in --pairs": (
        lambda src, tgt, pairs: ["--pairs", str(emptied(pairs, 3))],
        ("empty-pairs.txt:3 (an empty line)",),
    ),
    "an empty target side in --pairs": (
        lambda src, tgt, pairs: ["--pairs", str(emptied(pairs, 3, "Nur ||| "))],
        ("empty-pairs.txt:3 (an empty target side)",),
    ),
    "an empty source side in --pairs, raw text": (
        lambda src, tgt, pairs: ["--pairs", str(emptied(pairs, 3, "  |||  Only")), "--tokenize"],
        ("empty-pairs.txt:3 (an empty source side)",),
    ),
}


@pytest.mark.parametrize("case", list(EMPTY_SIDES))
def test_an_empty_side_is_named_in_a_note_and_keeps_its_empty_line(case, tiny_model, bitext, capsys):
    make_args, named = EMPTY_SIDES[case]
    out, err = run_align(["--model", str(tiny_model), "--method", "argmax", *make_args(*bitext)], capsys)
    lines = out.splitlines()
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and all(n in notes[0] for n in named), err
    assert len(lines) == len(SOURCE) and lines[2] == ""  # the line kept, empty: output lines match input lines
    assert all(lines[k] for k in (0, 3, 4))  # the other pairs are aligned


def emptied(path, line: int, text: str = ""):
    """A copy of `path` whose line `line` (1-based) is `text`: an empty line, or a pair with an empty side."""
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[line - 1] = text
    copy = path.with_name(f"empty-{path.name}")
    copy.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return copy


def short(path):
    shorter = path.with_name("short.txt")
    shorter.write_text("one\ntwo\n", encoding="utf-8")
    return shorter


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, tiny_model, bitext, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_args, expected = BAD_INPUTS[case]
    src, tgt, pairs = bitext
    args = make_args(src, tgt, pairs)  # may write its own input first (`short`)
    err = fails(["--model", str(tiny_model), *args], capsys, tmp_path)
    assert expected.format(pairs=pairs) in err, err
    if case == "line counts differ":
        assert "short.txt has 2" in err


RAW = [("Cherie, ich komme 2014 zurück.", "Cherie, I come back in 2014."), ("Ja!", "Yes!")]
SPLIT = [("Cherie , ich komme 2014 zurück .", "Cherie , I come back in 2014 ."), ("Ja !", "Yes !")]


def test_words_of_raw_text_split_punctuation_off():
    from polyalign.align.bitext import words_of

    expected = "Cherie , 2014 : « go » ok . . .".split()  # noqa: SIM905
    assert words_of(["Cherie,", "2014:", "«go»", "ok..."]) == expected
    assert [words_of(s.split()) for s, _ in RAW] == [s.split() for s, _ in SPLIT]


def test_tokenize_aligns_raw_text_as_its_pre_split_words(tiny_model, tmp_path, capsys):
    raw, split = tmp_path / "raw.txt", tmp_path / "split.txt"
    raw.write_text("".join(f"{s} ||| {t}\n" for s, t in RAW), encoding="utf-8")
    split.write_text("".join(f"{s} ||| {t}\n" for s, t in SPLIT), encoding="utf-8")
    model = ["--model", str(tiny_model), "--method", "argmax"]
    words = tmp_path / "words.txt"
    tokenized, _ = run_align([*model, "--pairs", str(raw), "--tokenize", "--output-words", str(words)], capsys)
    pre_split, _ = run_align([*model, "--pairs", str(split)], capsys)
    as_is, _ = run_align([*model, "--pairs", str(raw)], capsys)
    assert tokenized == pre_split and tokenized != as_is  # the links index the words with punctuation split off
    for line, (s, t) in zip(words.read_text(encoding="utf-8").splitlines(), SPLIT, strict=True):
        assert all(pair.split("<sep>")[0] in s.split() and pair.split("<sep>")[1] in t.split() for pair in line.split())
