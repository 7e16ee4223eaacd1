import numpy as np
import pytest
import torch

from polyalign.checkpoint import LoadedModel
from polyalign.data.batching import length_batches
from polyalign.data.prepared import PreparedData
from polyalign.evaluate.embed import embed_sentences, pool
from polyalign.evaluate.margin import margin_matrix
from polyalign.evaluate.tatoeba import evaluate_tatoeba, read_tatoeba, resolve_languages, retrieval_accuracy
from polyalign.io import DataError
from polyalign.layers import simalign_word_layer, xtreme_sentence_layer
from polyalign.model import MaskedLanguageModel
from tests.conftest import SAMPLE, tiny_config


def test_retrieval_accuracy_counts_correct_nearest_neighbours():
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(20, 8)).astype(np.float32)
    assert retrieval_accuracy(keys * 3.0, keys) == 1.0  # cosine: scale does not matter
    queries = keys.copy()
    queries[:5] = keys[[1, 2, 3, 4, 0]]  # five queries now point at another sentence
    assert retrieval_accuracy(queries, keys) == pytest.approx(15 / 20)


def test_word_alignment_layer_and_length_batches():
    assert (simalign_word_layer(12), simalign_word_layer(6), simalign_word_layer(2)) == (8, 4, 2)
    batches = length_batches([5, 1, 9, 3, 7, 2], batch_tokens=10)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(len(b) * max([5, 1, 9, 3, 7, 2][i] for i in b) <= 10 for b in batches)


def test_sentence_evaluations_default_to_xtremes_layer_7_of_12_scaled_to_depth():
    # XTREME reports BUCC and Tatoeba with layer 7 of XLM-R base's 12 (hidden_states[7]).
    assert xtreme_sentence_layer(12) == 7
    assert [xtreme_sentence_layer(L) for L in (24, 6, 4, 2)] == [14, 4, 2, 1]


def test_pooling_means_over_real_tokens_or_takes_the_first():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]], [[5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]])
    mask = torch.tensor([[True, True, False], [True, True, True]])  # the first sentence's third token is padding
    assert torch.equal(pool(hidden, mask, "mean"), torch.tensor([[2.0, 3.0], [7.0, 8.0]]))
    assert torch.equal(pool(hidden, mask, "first"), torch.tensor([[1.0, 2.0], [5.0, 6.0]]))
    layers = torch.stack([hidden, 2 * hidden])  # (L+1, B, T, C): every layer pooled alike
    assert torch.equal(pool(layers, mask, "mean")[1], torch.tensor([[4.0, 6.0], [14.0, 16.0]]))


def test_ratio_margin_equals_a_hand_computation():
    cos = np.array([[0.9, 0.5, 0.1], [0.8, 0.7, 0.2], [0.3, 0.6, 0.4]])
    # k = 2. Rows (x): mean of the two largest: 0.7, 0.75, 0.5. Columns (y): 0.85, 0.65, 0.3.
    # margin(x, y) = cos(x, y) / ((row mean + column mean) / 2).
    expected = np.array(
        [
            [0.9 / 0.775, 0.5 / 0.675, 0.1 / 0.5],
            [0.8 / 0.8, 0.7 / 0.7, 0.2 / 0.525],
            [0.3 / 0.675, 0.6 / 0.575, 0.4 / 0.4],
        ]
    )
    np.testing.assert_allclose(margin_matrix(cos, k=2), expected, rtol=1e-12)


def test_margin_retrieval_discounts_a_hub_that_cosine_retrieval_falls_for():
    rng = np.random.default_rng(0)
    base, hub = rng.normal(size=(8, 16)), rng.normal(size=16)
    queries = (base + 0.5 * rng.normal(size=(8, 16)) + hub).astype(np.float32)
    keys = base.copy()
    keys[0] += hub  # key 0 is close to every query
    keys = keys.astype(np.float32)
    assert retrieval_accuracy(queries, keys, "cosine") == pytest.approx(5 / 8)
    assert retrieval_accuracy(queries, keys, "margin") == 1.0


def test_tatoeba_on_the_sample_writes_a_layer_sweep(sample_prepared, tmp_path):
    data = PreparedData(sample_prepared)
    model = MaskedLanguageModel(tiny_config(vocab_size=data.meta["vocab_size"], num_languages=6)).eval()
    loaded = LoadedModel(model, data.tokenizer(), data.languages, sample_prepared)
    langs = resolve_languages("deu,cmn", SAMPLE / "tatoeba")
    result = evaluate_tatoeba(loaded, SAMPLE / "tatoeba", langs)
    assert result.layer == 1 and result.layers == [0, 1, 2] and result.xx_to_en.shape == (3, 2)
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


def test_tatoeba_options_reach_the_result_and_its_protocol(sample_prepared):
    data = PreparedData(sample_prepared)
    model = MaskedLanguageModel(tiny_config(vocab_size=data.meta["vocab_size"])).eval()
    loaded = LoadedModel(model, data.tokenizer(), data.languages, sample_prepared)
    langs = resolve_languages("deu", SAMPLE / "tatoeba")
    mean = evaluate_tatoeba(loaded, SAMPLE / "tatoeba", langs, layer=2)
    first = evaluate_tatoeba(loaded, SAMPLE / "tatoeba", langs, layer=2, pooling="first", score="margin")
    assert (mean.pooling, mean.score, mean.layer) == ("mean", "cosine", 2)
    assert (first.pooling, first.score, first.layer) == ("first", "margin", 2)
    assert mean.to_dict()["protocol"] == mean.protocol() != first.to_dict()["protocol"]  # written with the result
    assert not np.array_equal(mean.xx_to_en, first.xx_to_en)
    with pytest.raises(DataError, match="--pooling max: use one of mean, first"):
        evaluate_tatoeba(loaded, SAMPLE / "tatoeba", langs, pooling="max")


@pytest.mark.integration
def test_tatoeba_embeds_each_sentence_once_and_keeps_the_per_language_accuracies(sample_prepared, monkeypatch):
    # The reference is the per-language path: embed xx and its English side, then search each direction on
    # its own. Embedding distinct sentences once (English shared by all files) and reading en->xx from the
    # columns of the xx->en matrix must change no accuracy at any layer.
    import polyalign.evaluate.tatoeba as tatoeba

    data = PreparedData(sample_prepared)
    torch.manual_seed(0)
    model = MaskedLanguageModel(tiny_config(vocab_size=data.meta["vocab_size"], num_languages=6)).eval()
    loaded = LoadedModel(model, data.tokenizer(), data.languages, sample_prepared)
    langs = resolve_languages("all", SAMPLE / "tatoeba")
    calls = []
    for score in ("cosine", "margin"):
        expected = np.zeros((3, len(langs), 2))
        for j, lang in enumerate(langs):
            xx, en = read_tatoeba(SAMPLE / "tatoeba", lang)
            ex, ee = embed_sentences(loaded, xx, lang), embed_sentences(loaded, en, "en")
            for i in range(3):
                expected[i, j] = (
                    100 * retrieval_accuracy(ex[i], ee[i], score),
                    100 * retrieval_accuracy(ee[i], ex[i], score),
                )
        calls.clear()
        monkeypatch.setattr(tatoeba, "embed_sentences", lambda *a, **k: calls.append(a[1]) or embed_sentences(*a, **k))
        result = evaluate_tatoeba(loaded, SAMPLE / "tatoeba", langs, score=score)
        monkeypatch.undo()
        assert np.array_equal(result.xx_to_en, expected[..., 0]) and np.array_equal(result.en_to_xx, expected[..., 1])
        assert len(calls) == len(langs) + 1  # one pass over all English sentences, one per language
        assert all(len(set(sentences)) == len(sentences) for sentences in calls)
