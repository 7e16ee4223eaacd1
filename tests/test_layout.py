import numpy as np
import torch

from polyalign.data.layout import pair_layout, sentence_layout
from polyalign.data.streams import ParallelBatch
from polyalign.objectives.tlm import TLM, TLMConfig, order_pairs
from polyalign.tokenizer import SpecialTokens
from tests.conftest import tiny_config

SP = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=99, first_normal=5)
X, Y = np.array([10, 11, 12]), np.array([20, 21])


def test_sentence_layout():
    out = sentence_layout([X, Y], np.array([3, 5]), SP)
    assert out.input_ids.tolist() == [[0, 10, 11, 12, 2], [0, 20, 21, 2, 1]]
    assert out.attention_mask.tolist() == [[True] * 5, [True] * 4 + [False]]
    assert out.language_ids[0].tolist() == [3] * 5 and out.language_ids[1, :4].tolist() == [5] * 4
    assert out.maskable[0].tolist() == [False, True, True, True, False]


def test_tlm_xlm_style_resets_positions_and_carries_languages():
    out = pair_layout([X], [Y], np.array([3]), np.array([5]), SP, style="xlm")
    assert out.input_ids[0].tolist() == [0, 10, 11, 12, 2, 0, 20, 21, 2]
    assert out.position_ids[0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3]
    assert out.language_ids[0].tolist() == [3] * 5 + [5] * 4
    assert out.segment[0].tolist() == [0] * 5 + [1] * 4
    assert out.maskable[0].tolist() == [False, True, True, True, False, False, True, True, False]


def test_ppa_style_runs_positions_on_with_one_separator_and_languages_only_when_given():
    out = pair_layout([X], [Y], None, None, SP, style="ppa")  # TLM's ppa style: no language ids
    assert out.input_ids[0].tolist() == [0, 10, 11, 12, 2, 20, 21, 2]
    assert out.position_ids[0].tolist() == list(range(8))
    assert out.language_ids is None
    assert out.segment[0].tolist() == [0] * 5 + [1] * 3
    assert out.maskable[0].tolist() == [False, True, True, True, False, True, True, False]
    # the aligner's pair layout for a model with language embeddings: each side its own, positions still run on
    out = pair_layout([X], [Y], np.array([3]), np.array([5]), SP, style="ppa")
    assert out.language_ids[0].tolist() == [3] * 5 + [5] * 3
    assert out.position_ids[0].tolist() == list(range(8))


def test_tlm_batch_swaps_sides_at_random():
    raw = ParallelBatch([X] * 400, [Y] * 400, np.zeros(400, int), np.ones(400, int))
    swap = np.random.default_rng(0).random(400) < 0.5
    first, _, first_lang, _ = order_pairs(raw, swap)
    assert all((f is Y) == s for f, s in zip(first, swap, strict=True))
    assert (first_lang == swap.astype(int)).all()
    tlm = TLM(TLMConfig(style="xlm"), SP, tiny_config(num_languages=2))
    batch = tlm.make_batch(raw, np.random.default_rng(1))
    assert 0.4 < batch["swapped"].float().mean() < 0.6
    first_is_y = batch["position_ids"][:, 4] == 0  # <s> Y </s> fills columns 0..3, so position 0 restarts at 4
    assert torch.equal(first_is_y, batch["swapped"])
