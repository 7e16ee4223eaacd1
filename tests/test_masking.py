import numpy as np
import pytest

from polyalign.data.layout import sentence_layout
from polyalign.data.masking import IGNORE, mask_tokens
from polyalign.tokenizer import SpecialTokens

SP = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=500, first_normal=5)


def _batch(rng, n=400, length=60):
    sentences = [rng.integers(5, 500, size=rng.integers(5, length)) for _ in range(n)]
    return sentence_layout(sentences, None, SP)


def test_masking_statistics_match_bert_defaults():
    rng = np.random.default_rng(0)
    layout = _batch(rng)
    corrupted, labels = mask_tokens(layout.input_ids, layout.maskable, rng, SP.mask, (5, 500))
    chosen = labels != IGNORE
    share = chosen.sum() / layout.maskable.sum()
    assert share == pytest.approx(0.15, abs=0.01)
    ids = layout.input_ids[chosen]
    out = corrupted[chosen]
    as_mask = (out == SP.mask).mean()
    kept = (out == ids).mean()
    assert as_mask == pytest.approx(0.8, abs=0.02)
    assert kept == pytest.approx(0.1 + 0.1 / 495, abs=0.02)  # kept, or randomly replaced by itself
    random = 1 - as_mask - kept
    assert random == pytest.approx(0.1, abs=0.02)
    assert (labels[chosen] == layout.input_ids[chosen]).all()
    # Unchosen positions are untouched.
    assert (corrupted[~chosen] == layout.input_ids[~chosen]).all()


def test_special_tokens_and_padding_are_never_masked():
    rng = np.random.default_rng(1)
    layout = _batch(rng, n=200)
    for _ in range(5):
        corrupted, labels = mask_tokens(layout.input_ids, layout.maskable, rng, SP.mask, (5, 500), mask_prob=0.5)
        special = np.isin(layout.input_ids, list(SP.all))
        assert (labels[special] == IGNORE).all()
        assert (corrupted[special] == layout.input_ids[special]).all()
        # Random replacements come from ordinary pieces only.
        assert not np.isin(corrupted[~special & (corrupted != SP.mask)], [SP.pad, SP.cls, SP.sep, SP.unk]).any()


def test_every_row_gets_a_target_even_when_short():
    rng = np.random.default_rng(2)
    layout = sentence_layout([np.array([7]), np.array([8, 9])] * 50, None, SP)
    _, labels = mask_tokens(layout.input_ids, layout.maskable, rng, SP.mask, (5, 500))
    assert ((labels != IGNORE).sum(axis=1) >= 1).all()
