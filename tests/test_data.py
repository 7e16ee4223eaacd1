import gzip
import multiprocessing
import time
from pathlib import Path

import numpy as np
import pytest

from polyalign.data.prepare import PrepareConfig, discover_corpus, ordered_map, prepare, sample_counts
from polyalign.data.prepared import PreparedData
from polyalign.data.sampling import language_probabilities
from polyalign.data.shards import ShardWriter, TokenShard
from polyalign.data.streams import MonoStream, ParallelStream, StreamConfig
from polyalign.io import DataError, LinePolicy


def test_language_probabilities_follow_the_exponent():
    p = language_probabilities([100, 1], alpha=0.5)
    assert p == pytest.approx([10 / 11, 1 / 11])
    assert language_probabilities([100, 1], alpha=1.0) == pytest.approx([100 / 101, 1 / 101])
    assert language_probabilities([100, 1], alpha=0.0) == pytest.approx([0.5, 0.5])
    with pytest.raises(ValueError):
        language_probabilities([1, 2], alpha=1.5)


def test_shard_round_trip(tmp_path):
    w = ShardWriter(tmp_path / "x", np.uint16)
    w.add([[1, 2, 3], [4], [5, 6]])
    w.add([[7]])
    assert w.close() == {"lines": 4, "tokens": 7}
    s = TokenShard(tmp_path / "x", np.uint16)
    assert len(s) == 4 and s[0].tolist() == [1, 2, 3] and s[3].tolist() == [7] and s.length(2) == 2


def test_stream_samples_languages_with_alpha_and_respects_the_token_budget(tmp_path):
    shards = []
    for name, n in (("big", 900), ("small", 100)):
        w = ShardWriter(tmp_path / name, np.uint16)
        w.add([[10 + (i % 50)] * 5 for i in range(n)])  # equal lengths: token share = line share
        w.close()
        shards.append(TokenShard(tmp_path / name, np.uint16))
    cfg = StreamConfig(max_tokens=70, max_length=5, alpha=0.5, pack=False)
    stream = MonoStream(shards, [0, 1], cfg, seed=0)
    langs = []
    for _ in range(300):
        batch = stream.next_batch()
        assert len(batch.sentences) * max(len(s) + 2 for s in batch.sentences) <= 70
        langs.extend(batch.languages.tolist())
    share_small = np.mean(np.array(langs) == 1)
    assert share_small == pytest.approx(language_probabilities([900, 100], 0.5)[1], abs=0.03)


def test_stream_state_restores_the_exact_sequence(tmp_path):
    w = ShardWriter(tmp_path / "a", np.uint16)
    w.add([[i, i + 1, i + 2][: 1 + i % 3] for i in range(200)])
    w.close()
    shard = TokenShard(tmp_path / "a", np.uint16)
    cfg = StreamConfig(max_tokens=40, max_length=8)
    s1 = MonoStream([shard], [0], cfg, seed=3)
    for _ in range(5):
        s1.next_batch()
    state = s1.state_dict()
    expected = [[x.tolist() for x in s1.next_batch().sentences] for _ in range(5)]
    s2 = MonoStream([shard], [0], cfg, seed=3)
    s2.load_state_dict(state)
    assert [[x.tolist() for x in s2.next_batch().sentences] for _ in range(5)] == expected


def test_parallel_stream_keeps_pairs_together(sample_prepared):
    data = PreparedData(sample_prepared)
    a, b, src, tgt = data.parallel_shards()["en-de"]
    stream = ParallelStream([(src, tgt)], [(0, 1)], StreamConfig(max_tokens=400, max_length=50), seed=0)
    batch = stream.next_batch()
    index = {tuple(src[i].tolist()): i for i in range(len(src))}
    for x, y in zip(batch.source, batch.target, strict=True):
        assert tuple(tgt[index[tuple(x.tolist())]].tolist()) == tuple(y.tolist())


def test_prepared_sample_has_every_language_and_drops_test_overlap(sample_prepared):
    data = PreparedData(sample_prepared)
    assert data.languages == ["de", "en", "es", "fr", "ru", "zh"]
    assert data.meta["excluded_as_eval_overlap"] > 0
    tok = data.tokenizer()
    assert (tok.special.cls, tok.special.pad, tok.special.sep, tok.special.unk, tok.special.mask) == (0, 1, 2, 3, 4)
    assert tok.decode(tok.encode_batch(["Guten Morgen"])[0]) == "Guten Morgen"


# ---------------------------------------------------------------------------------------------------------
# Bad input: one clear line naming file and line.


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _prepare(tmp_path, policy="error", **files):
    for name, data in files.items():
        a, b, side = name.split("_")  # en_de_en -> en-de.en
        _write(tmp_path / "par" / f"{a}-{b}.{side}", data)
    corpus = discover_corpus(None, tmp_path / "par")
    return prepare(
        corpus,
        PrepareConfig(
            out=tmp_path / "out",
            vocab_size=60,
            tokenizer_sample_lines=200,
            policy=LinePolicy(on_bad=policy, max_chars=80),
        ),
    )


GOOD = b"".join(b"sentence number %d here\n" % i for i in range(30))


def test_parallel_files_of_different_length(tmp_path):
    with pytest.raises(DataError, match=r"en-de\.de:31: parallel files differ in length: .*en-de\.en ends after 30"):
        _prepare(tmp_path, en_de_en=GOOD, en_de_de=GOOD + b"one more\n")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (b"caf\xe9 au lait\n", r"en-de\.de:3: invalid UTF-8 \(byte 0xe9 at byte 4\)"),
        (b"   \n", r"en-de\.de:3: empty line"),
        (b"x" * 200 + b"\n", r"en-de\.de:3: over-long line \(200 > 80 characters\)"),
    ],
)
def test_bad_lines_error_with_file_and_line(tmp_path, bad, message):
    lines = GOOD.splitlines(keepends=True)
    de = b"".join(lines[:2]) + bad + b"".join(lines[3:])
    with pytest.raises(DataError, match=message):
        _prepare(tmp_path, en_de_en=GOOD, en_de_de=de)


def test_bad_lines_can_be_skipped_and_counted(tmp_path):
    lines = GOOD.splitlines(keepends=True)
    de = b"".join(lines[:2]) + b"\xff\n" + b"\n" + b"".join(lines[4:])
    meta = _prepare(tmp_path, policy="skip", en_de_en=GOOD, en_de_de=de)
    assert meta["parallel"]["en-de"]["lines"] == 28
    assert meta["skipped_lines"] == {"invalid UTF-8": 1, "empty line": 1}
    assert meta["skipped_first_at"]["empty line"].endswith("en-de.de:4")


def test_missing_files_and_missing_other_side(tmp_path):
    with pytest.raises(DataError, match="parallel folder not found"):
        discover_corpus(None, tmp_path / "nope")
    _write(tmp_path / "par" / "en-fr.en", GOOD)
    with pytest.raises(DataError, match=r"en-fr\.en: its other side `en-fr\.fr` is missing"):
        discover_corpus(None, tmp_path / "par")


def test_gzip_and_tsv_inputs(tmp_path):
    _write(tmp_path / "par" / "en-de.tsv.gz", gzip.compress(b"".join(b"a%d b\tc%d d\n" % (i, i) for i in range(30))))
    _write(tmp_path / "mono" / "en.txt.gz", gzip.compress(GOOD))
    corpus = discover_corpus(tmp_path / "mono", tmp_path / "par")
    meta = prepare(corpus, PrepareConfig(out=tmp_path / "out", vocab_size=60, tokenizer_sample_lines=100))
    assert meta["parallel"]["en-de"]["lines"] == 30 and meta["mono"]["en"]["lines"] == 30


def test_prepare_never_overwrites(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep me")
    with pytest.raises(DataError, match="already exists"):
        _prepare(tmp_path, en_de_en=GOOD, en_de_de=GOOD)
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep me"


# ---------------------------------------------------------------------------------------------------------
# Parallel prepare with bounded memory.


@pytest.mark.parametrize("want", [0, 7, 40, 41, 100])
def test_streaming_sample_picks_the_requested_lines_block_by_block(want):
    # 41 lines in blocks of 8: every block at most 8 long, `want` picks in all; distinct lines when the
    # corpus has enough (want <= 41), draws with replacement when upsampling.
    blocks = list(sample_counts(41, want, np.random.default_rng(0), block=8))
    assert [len(b) for b in blocks] == [8, 8, 8, 8, 8, 1]
    counts = np.concatenate(blocks)
    assert counts.sum() == want
    if want <= 41:
        assert counts.max(initial=0) <= 1
    again = np.concatenate(list(sample_counts(41, want, np.random.default_rng(0), block=8)))
    assert np.array_equal(counts, again)


def test_streaming_sample_is_uniform_over_blocks():
    # Without replacement each line is picked with probability want/total, whichever block it falls in.
    rng = np.random.default_rng(1)
    hits = sum(np.concatenate(list(sample_counts(40, 10, rng, block=16))) for _ in range(2000))
    assert np.allclose(hits / 2000, 0.25, atol=0.05)


def test_prepare_output_does_not_depend_on_the_number_of_workers(tmp_path):
    _write(tmp_path / "mono" / "en.txt", b"".join(b"english line %d with words\n" % i for i in range(300)))
    _write(tmp_path / "mono" / "de.txt", b"".join(b"deutsche zeile %d mit worten\n" % i for i in range(120)))
    _write(tmp_path / "par" / "de-en.de", b"".join(b"zeile %d hier\n" % i for i in range(90)))
    _write(tmp_path / "par" / "de-en.en", b"".join(b"line %d here\n" % i for i in range(90)))
    _write(tmp_path / "eval" / "test.txt", b"english line 7 with words\nzeile 3 hier\n")
    corpus = discover_corpus(tmp_path / "mono", tmp_path / "par")
    outputs = []
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        config = PrepareConfig(
            out=out,
            vocab_size=80,
            tokenizer_sample_lines=150,
            chunk_lines=16,
            workers=workers,
            exclude=[tmp_path / "eval"],
        )
        meta = prepare(corpus, config)
        assert meta["excluded_as_eval_overlap"] == 2 and meta["mono"]["en"]["lines"] == 299
        files = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        # SentencePiece's model file records the paths it was trained from and into: compare its pieces.
        tokenizer = PreparedData(out).tokenizer()
        files[Path("pieces")] = [tokenizer.id_to_piece(i) for i in range(tokenizer.special.vocab_size)]
        del files[Path("tokenizer/sentencepiece.model")]
        outputs.append(files)
    assert outputs[0].keys() == outputs[1].keys() and len(outputs[0]) > 8
    assert outputs[0] == outputs[1]


def _slow_first(i: int) -> int:
    time.sleep(0.5 if i == 0 else 0.0)
    return i * i


def test_ordered_map_keeps_input_order_and_reads_a_bounded_window():
    # The first item finishes last on a 2-process pool: results must still come in input order, and the
    # input must be read at most `ahead` items before the first result (Pool.imap would read it all).
    read = []

    def items():
        for i in range(8):
            read.append(i)
            yield i

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = ordered_map(pool, _slow_first, items(), ahead=3)
        assert next(results) == 0 and len(read) <= 3
        assert [0, *results] == [i * i for i in range(8)]
    assert list(ordered_map(None, _slow_first, range(3), ahead=3)) == [0, 1, 4]
