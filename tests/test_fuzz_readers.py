"""Readers no input can crash, in short: every target of bench/perf/fuzz.py (each reader a user's file reaches, two
whole commands) reads a few valid files mutated by hypothesis, derandomized, and answers with success or one line,
writing nothing outside its output. The bench runs the same targets on thousands of inputs."""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.perf.fuzz import TARGETS, Tally, build_seeds, check_one
from polyalign.align.reading import model_depth, resolve_reading
from polyalign.checkpoint import load_model
from polyalign.fit_aligner import read_fit_request
from polyalign.io import DataError, LinePolicy, read_lines
from polyalign.tokenizer import load_tokenizer

EXAMPLES = 12


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return build_seeds(tmp_path_factory.mktemp("fuzz"))


@pytest.mark.parametrize("name", list(TARGETS))
def test_the_valid_files_are_read(name, seeds, tmp_path):
    """Every target reads its files unmutated: the one-line answers the fuzzer counts come from the mutations."""
    shutil.copytree(seeds, tmp_path / "in")
    TARGETS[name].read(tmp_path / "in")


@pytest.mark.parametrize("name", list(TARGETS))
def test_a_mutated_file_is_read_or_answered_in_one_line(name, seeds, tmp_path):
    tally = Tally()

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.data())
    def read(data):
        problem = check_one(TARGETS[name], seeds, tmp_path / "case", data, tally)
        assert problem is None, problem

    read()
    assert tally.inputs >= EXAMPLES and tally.tracebacks == 0 and tally.written_outside == 0


# ---------------------------------------------------------------------------------------------------------
# What the bench's fuzzing found, each fixed in its reader: one input of each, answered in one line


def _gzip_cut(folder):
    whole = (folder / "mono" / "fr.txt.gz").read_bytes()
    (folder / "mono" / "fr.txt.gz").write_bytes(whole[: len(whole) // 2])
    return lambda: list(read_lines(folder / "mono" / "fr.txt.gz", LinePolicy())), "fr.txt.gz: an input file ends early"


def _gzip_corrupt(folder):
    data = bytearray((folder / "mono" / "fr.txt.gz").read_bytes())
    data[30] ^= 0xFF
    (folder / "mono" / "fr.txt.gz").write_bytes(bytes(data))
    return lambda: list(read_lines(folder / "mono" / "fr.txt.gz", LinePolicy())), "fr.txt.gz: not readable gzip data"


def _config(folder, edit):
    path = folder / "model" / "config.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))
    return path


def _huge_vocabulary(folder):
    _config(folder, lambda m: m["encoder"].update(vocab_size=10**12))
    return lambda: load_model(folder / "model"), "config.json: the encoder config makes"


def _hidden_size_text(folder):
    _config(folder, lambda m: m["encoder"].update(hidden_size="16"))
    return lambda: load_model(folder / "model"), "config.json: encoder:"


def _encoder_not_an_object(folder):
    _config(folder, lambda m: m.update(encoder=5))
    return lambda: model_depth(folder / "model"), "names no number of layers"


def _huge_new_table(folder):  # a table the weights file does not hold (language embeddings) made huge
    _config(folder, lambda m: m["encoder"].update(num_languages=2**32))
    return lambda: load_model(folder / "model"), "values, the weights file holds"


def _huge_row_multiple(folder):  # padding rows no file holds: found by the fuzz bench, ~16 GB taken before
    _config(folder, lambda m: m["encoder"].update(vocab_row_multiple=10**8))
    return lambda: load_model(folder / "model"), "values, the weights file holds"


def _billion_layers(folder):  # found by the fuzz bench: minutes spent building the layers on the meta device
    _config(folder, lambda m: m["encoder"].update(num_layers=10**9))
    return lambda: load_model(folder / "model"), "layers, the weights file holds 2"


def _padding_id_fraction(folder):
    _config(folder, lambda m: m["encoder"].update(pad_token_id=1.5))
    return lambda: load_model(folder / "model"), "config.json: encoder:"


def _request_threshold_list(folder):
    path = folder / "fit" / "fit-request.json"
    path.write_text(path.read_text().replace('"softmax_threshold": null', '"softmax_threshold": [1]'))
    return lambda: read_fit_request(folder / "fit"), "--softmax-threshold [1]: use a probability"


def _tokenizer_garbage(folder):
    (folder / "model" / "tokenizer" / "sentencepiece.model").write_bytes(b"\x00not a model")
    return lambda: load_tokenizer(folder / "model" / "tokenizer"), "sentencepiece.model: not a SentencePiece model"


def _tokenizer_meta_list(folder):
    (folder / "model" / "tokenizer" / "polyalign_tokenizer.json").write_text("[]")
    return lambda: load_tokenizer(folder / "model" / "tokenizer"), "kind None: expected sentencepiece or huggingface"


def _tokenizer_file_number(folder):
    (folder / "model" / "tokenizer" / "polyalign_tokenizer.json").write_text('{"kind": "sentencepiece", "file": 5}')
    return lambda: load_tokenizer(folder / "model" / "tokenizer"), "file 5: expected the model file's name"


def _request_infinite_steps(folder):
    path = folder / "fit" / "fit-request.json"
    path.write_text(path.read_text().replace('"steps": 4', '"steps": 1e309'))
    return lambda: read_fit_request(folder / "fit"), "fit-request.json: damaged (OverflowError"


def _reading_layer_true(folder):
    (folder / "model" / "alignment.json").write_text('{"method": "softmax", "layer": true}')
    return lambda: resolve_reading(folder / "model", 2), "alignment.json: layer True"


FOUND = {
    f.__name__[1:]: f
    for f in (_gzip_cut, _gzip_corrupt, _huge_vocabulary, _hidden_size_text, _encoder_not_an_object, _huge_new_table,
              _huge_row_multiple, _billion_layers, _padding_id_fraction, _tokenizer_garbage, _tokenizer_meta_list,
              _tokenizer_file_number, _request_infinite_steps, _request_threshold_list, _reading_layer_true)
}  # fmt: skip


@pytest.mark.parametrize("case", list(FOUND))
def test_each_input_the_fuzzer_found_is_one_line(case, seeds, tmp_path):
    folder = tmp_path / "in"
    shutil.copytree(seeds, folder)
    read, expected = FOUND[case](folder)
    with pytest.raises(DataError) as err:
        read()
    assert expected in str(err.value) and "\n" not in str(err.value), str(err.value)
