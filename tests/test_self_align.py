"""awesome-align's self-training objective (objectives/self_align.py) and the aligner's bare-boundary rule."""

from __future__ import annotations

import pytest
import torch

from polyalign.align.aligner import unlink_bare_boundaries
from polyalign.objectives.self_align import (
    SelfAlignConfig,
    alignment_layer,
    directional_log_probs,
    self_alignment_loss,
    self_labels,
)


def states(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor([rows], dtype=torch.float32)  # (1, n, C)


def test_argmax_labels_are_the_mutual_argmax_of_the_cosines():
    # Cosines: s0 -> (t0 0.0, t1 ~1.0), s1 -> (t0 0.8, t1 ~0.64). Row argmaxes (0, 1), (1, 0); column argmaxes
    # t0 -> s1, t1 -> s0: both links are mutual. Source 1's closeness to target 1 (0.64) is not a link.
    source = states([[1.0, 0.0], [0.6, 0.8]])
    target = states([[0.0, 1.0], [1.0, 0.05]])
    mask = torch.ones(1, 2, 2, dtype=torch.bool)
    labels = self_labels(source, target, mask, "argmax", 1e-3)
    assert labels[0].tolist() == [[False, True], [True, False]]


def test_labels_ignore_masked_cells():
    source = states([[1.0, 0.0], [1.0, 0.0]])
    target = states([[1.0, 0.0], [1.0, 0.0]])
    mask = torch.tensor([[[True, False], [False, False]]])
    for how in ("argmax", "softmax"):
        labels = self_labels(source, target, mask, how, 1e-3)
        assert not (labels & ~mask).any(), how


def test_directional_softmaxes_normalise_rows_and_columns_over_real_cells_only():
    scores = torch.randn(1, 3, 4)
    mask = torch.ones(1, 3, 4, dtype=torch.bool)
    mask[:, :, 3] = False  # a padded target token
    log_xy, log_yx = directional_log_probs(scores, mask)
    torch.testing.assert_close(log_xy.exp().masked_fill(~mask, 0).sum(-1), torch.ones(1, 3))
    torch.testing.assert_close(log_yx.exp().masked_fill(~mask, 0).sum(-2)[:, :3], torch.ones(1, 3))


def test_loss_falls_as_the_labelled_links_gain_probability_in_both_directions():
    torch.manual_seed(0)
    source, target = torch.randn(1, 4, 8), torch.randn(1, 5, 8)
    mask = torch.ones(1, 4, 5, dtype=torch.bool)
    labels = self_labels(source, target, mask, "argmax", 1e-3)
    for how in ("argmax", "softmax"):
        before = self_alignment_loss(source, target, mask, labels, how)
        sharper = self_alignment_loss(3 * source, target, mask, labels, how)  # the same links, more peaked
        assert sharper < before, how

    # Both directions count: rows already one-hot on the link still pay for a column that splits its mass
    # (target 0 is both sources' best); a one-direction loss would be ~0 here.
    two_sources, three_targets = states([[10.0, 0.0], [10.0, 0.0]]), states([[5.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    link = torch.tensor([[[True, False, False], [False, False, False]]])
    loss = self_alignment_loss(two_sources, three_targets, torch.ones(1, 2, 3, dtype=torch.bool), link, "argmax")
    assert loss.item() == pytest.approx(-0.5 * torch.log(torch.tensor(0.5)).item(), abs=1e-3)


def test_the_objective_trains_the_layers_below_the_alignment_layer_only():
    import numpy as np

    from polyalign.data.streams import ParallelBatch
    from polyalign.model import EncoderConfig, MaskedLanguageModel
    from polyalign.objectives import build_objective
    from polyalign.tokenizer import SpecialTokens

    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=40, hidden_size=32, num_layers=3, num_heads=2, ffn_size=64, max_positions=32)
    model = MaskedLanguageModel(config)
    special = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=40, first_normal=5)
    objective = build_objective("self_align", {}, special, config)
    rng = np.random.default_rng(0)
    raw = ParallelBatch(
        [rng.integers(5, 40, size=n) for n in (5, 7)],
        [rng.integers(5, 40, size=n) for n in (6, 4)],
        np.zeros(2, dtype=np.int64),
        np.ones(2, dtype=np.int64),
    )
    out = objective(model, objective.make_batch(raw, rng))
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert objective.layer(config.num_layers) == alignment_layer(3) == 2
    assert model.encoder.layers[1].feed_forward.up.weight.grad.abs().sum() > 0
    assert model.encoder.layers[2].feed_forward.up.weight.grad is None  # above the alignment layer: not run


def test_alignment_layer_is_eight_of_twelve():
    assert alignment_layer(12) == 8 and alignment_layer(6) == 4


def test_config_refuses_unknown_label_rules():
    with pytest.raises(ValueError, match="labels"):
        SelfAlignConfig(labels="threshold")


class Pieces:
    """A tokenizer stand-in that knows only id_to_piece."""

    def __init__(self, pieces: dict[int, str]):
        self.pieces = pieces

    def id_to_piece(self, token_id: int) -> str:
        return self.pieces[token_id]


def test_bare_boundary_pieces_are_unlinked_only_inside_longer_words():
    tok = Pieces({5: "▁", 6: "科学家", 7: "▁一直", 8: "."})
    # Word 0 = "▁" + "科学家" (the bare mark is unlinked), word 1 = "▁一直", word 2 = "▁" alone (kept: it is all
    # the word has, e.g. a word that normalises to nothing), word 3 = "▁" + ".".
    ids, words = [5, 6, 7, 5, 5, 8], [0, 0, 1, 2, 3, 3]
    assert unlink_bare_boundaries(ids, words, tok) == (ids, [-1, 0, 1, 2, -1, 3])
