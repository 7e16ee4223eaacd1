import numpy as np
import pytest

from polyalign.checkpoint import LoadedModel
from polyalign.data.prepare import PreparedData
from polyalign.evaluate.embed import default_layer, length_batches
from polyalign.evaluate.tatoeba import evaluate_tatoeba, read_tatoeba, resolve_languages, retrieval_accuracy
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from tests.conftest import SAMPLE, tiny_config


def test_retrieval_accuracy_counts_correct_nearest_neighbours():
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(20, 8)).astype(np.float32)
    assert retrieval_accuracy(keys * 3.0, keys) == 1.0  # cosine: scale does not matter
    queries = keys.copy()
    queries[:5] = keys[[1, 2, 3, 4, 0]]  # five queries now point at another sentence
    assert retrieval_accuracy(queries, keys) == pytest.approx(15 / 20)


def test_default_layer_and_length_batches():
    assert (default_layer(12), default_layer(6), default_layer(2)) == (8, 4, 2)
    batches = length_batches([5, 1, 9, 3, 7, 2], batch_tokens=10)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(len(b) * max([5, 1, 9, 3, 7, 2][i] for i in b) <= 10 for b in batches)


def test_tatoeba_on_the_sample_writes_a_layer_sweep(sample_prepared, tmp_path):
    data = PreparedData(sample_prepared)
    model = MaskedLanguageModel(tiny_config(vocab_size=data.meta["vocab_size"], num_languages=6)).eval()
    loaded = LoadedModel(model, data.tokenizer(), data.languages, sample_prepared)
    langs = resolve_languages("deu,cmn", SAMPLE / "tatoeba")
    result = evaluate_tatoeba(loaded, SAMPLE / "tatoeba", langs)
    assert result.layer == 2 and result.layers == [0, 1, 2] and result.xx_to_en.shape == (3, 2)
    assert ((result.xx_to_en >= 0) & (result.xx_to_en <= 100)).all()
    d = result.to_dict()
    assert set(d["reported"]["per_language"]) == {"deu", "cmn"} and len(d["sweep"]) == 3
    csv_path, png = result.write_sweep(tmp_path)
    assert csv_path.read_text().startswith("layer,direction,deu,cmn,average") and png.stat().st_size > 1000


def test_tatoeba_reader_errors(tmp_path):
    (tmp_path / "tatoeba.deu-eng.deu").write_text("a\nb\n")
    (tmp_path / "tatoeba.deu-eng.eng").write_text("a\n")
    with pytest.raises(DataError, match="2 lines but .*tatoeba.deu-eng.eng has 1"):
        read_tatoeba(tmp_path, "de")
    with pytest.raises(DataError, match=r"no Tatoeba files for \['fra'\]"):
        resolve_languages("fr", tmp_path)
