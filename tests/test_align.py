"""The alignment math: Sinkhorn, filtering (XLM-Align Eqs. 1-9), SimAlign itermax, word lifting, AER, gold files."""

import math

import numpy as np
import pytest
import torch

from polyalign.align import words as word_level
from polyalign.align.aer import alignment_error_rate, read_gold
from polyalign.align.extract import (
    filter_alignments,
    link_probabilities,
    mutual_argmax,
    simalign_itermax,
    softmax_links,
    subword_links,
)
from polyalign.align.transport import log_dot_similarity, sinkhorn
from polyalign.align.words import (
    lift_max_to_words,
    lift_to_words,
    link_lists,
    pad_word_ids,
    side_positions,
)
from polyalign.io import DataError


def padded_mask(lengths: list[tuple[int, int]], n: int, m: int) -> torch.Tensor:
    rows = torch.arange(n)[None, :] < torch.tensor([a for a, _ in lengths])[:, None]
    cols = torch.arange(m)[None, :] < torch.tensor([b for _, b in lengths])[:, None]
    return rows[:, :, None] & cols[:, None, :]  # (B, n, m)


# --- Sinkhorn (Eqs. 3-6) ---------------------------------------------------------------------------------


def test_sinkhorn_rows_and_columns_sum_to_one_on_padded_square_pairs():
    torch.manual_seed(0)
    mask = padded_mask([(4, 4), (2, 2), (5, 5)], 5, 5)
    similarity = 2 * torch.randn(3, 5, 5, dtype=torch.float64)
    plan = sinkhorn(similarity, mask, mu=1.0, iterations=100).exp()
    # Tolerance 1e-6: for n = m Sinkhorn converges geometrically to the doubly stochastic matrix.
    for b, (n, _) in enumerate([(4, 4), (2, 2), (5, 5)]):
        torch.testing.assert_close(plan[b, :n, :n].sum(-1), torch.ones(n, dtype=torch.float64), atol=1e-6, rtol=0)
        torch.testing.assert_close(plan[b, :n, :n].sum(-2), torch.ones(n, dtype=torch.float64), atol=1e-6, rtol=0)
    assert plan[~mask].abs().max() == 0  # padding carries no mass


def test_sinkhorn_matches_the_plain_iteration_of_eq_6_and_survives_huge_scores():
    torch.manual_seed(1)
    f = torch.randn(4, 6, dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mu = 0.5
    K = torch.exp(f / mu)  # Eq. (5)
    v = torch.ones(6, dtype=torch.float64)
    for _ in range(2):  # Eq. (6), v^0 = 1
        u = 1 / (K @ v)
        v = 1 / (K.T @ u)
    expected = torch.diag(u) @ K @ torch.diag(v)  # Eq. (4)
    got = sinkhorn(f, mask, mu=mu, iterations=2).exp()
    torch.testing.assert_close(got, expected, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(got.sum(0), torch.ones(6, dtype=torch.float64))  # columns exactly, rows not (n != m)
    # In log space dot products of 1e4 (exp would overflow) still give a finite plan.
    huge = sinkhorn(1e4 * torch.rand(1, 3, 3), torch.ones(1, 3, 3, dtype=torch.bool), iterations=2)
    assert torch.isfinite(huge).all()


def test_similarity_floors_negative_dot_products_at_eps():
    h = torch.tensor([[1.0, 0.0]])
    sim = log_dot_similarity(h, torch.tensor([[2.0, 0.0], [-1.0, 0.0]]), eps=1e-6)
    torch.testing.assert_close(sim, torch.tensor([[math.log(2.0), math.log(1e-6)]]))


# --- Eq. (7) and iterative filtering (Eqs. 8-9) -------------------------------------------------------------

A_STAR = torch.tensor([[0.50, 0.30, 0.20], [0.45, 0.42, 0.13], [0.05, 0.30, 0.65]])


def test_filtering_reproduces_the_hand_worked_example():
    # Round 1: row argmax (0->0, 1->0, 2->2), column argmax (0->0, 1->1, 2->2): links {(0,0), (2,2)}.
    # Eq. (9): zero the links; rows 0, 2 and columns 0, 2 are touched, so A*[1,0] = 0.9*0.45 = 0.405 while
    # the untouched A*[1,1] stays 0.42. Round 2: row 1 -> column 1 (0.42 > 0.405), column 1 -> row 1
    # (0.42 > 0.9*0.30): link (1,1).
    mask = torch.ones(3, 3, dtype=torch.bool)
    links = filter_alignments(A_STAR.log(), mask, iterations=2, alpha=0.9)
    assert link_lists(links[None])[0] == [(0, 0), (1, 1), (2, 2)]
    # Without the discount row 1 prefers column 0 (0.45 > 0.42), and column 0 now prefers row 1.
    assert link_lists(filter_alignments(A_STAR.log(), mask, 2, alpha=1.0)[None])[0] == [(0, 0), (1, 0), (2, 2)]
    assert link_lists(filter_alignments(A_STAR.log(), mask, 1)[None])[0] == [(0, 0), (2, 2)]


def released_iter_max(sim: np.ndarray, max_count: int = 2, alpha: float = 0.9) -> np.ndarray:
    """XLM-Align's released self-labeling filter (`XlmAlignTask.iter_max`, microsoft/unilm
    infoxlm/src-infoxlm/infoxlm/tasks/xlm_align.py), transcribed as the test oracle."""
    m, n = sim.shape
    inter = np.eye(n)[sim.argmax(axis=1)] * np.eye(m)[sim.argmax(axis=0)].transpose()
    if min(m, n) > 2:
        count = 1
        while count < max_count:
            mask_x = 1.0 - np.tile(inter.sum(1)[:, np.newaxis], (1, n)).clip(0.0, 1.0)
            mask_y = 1.0 - np.tile(inter.sum(0)[np.newaxis, :], (m, 1)).clip(0.0, 1.0)
            mask = ((alpha * mask_x) + (alpha * mask_y)).clip(0.0, 1.0)
            mask_zeros = 1.0 - ((1.0 - mask_x) * (1.0 - mask_y))
            if mask_x.sum() < 1.0 or mask_y.sum() < 1.0:
                mask *= 0.0
                mask_zeros *= 0.0
            new_sim = sim * mask
            fwd = np.eye(n)[new_sim.argmax(axis=1)] * mask_zeros
            bac = np.eye(m)[new_sim.argmax(axis=0)].transpose() * mask_zeros
            if np.array_equal(inter + fwd * bac, inter):
                break
            inter = inter + fwd * bac
            count += 1
    return inter > 0


def test_ot_filtering_is_the_released_iter_max():
    # The filtering of Eq. (9) against XLM-Align's released code, on Sinkhorn plans of every shape it meets.
    # The literal reading of Eq. (9) (alpha also where row and column are both aligned) fails this test.
    # (The released Sinkhorn normalises columns first, Eq. (6) rows first; we keep the paper's Eq. (6).)
    generator = torch.Generator().manual_seed(0)
    for n, m in [(1, 4), (2, 2), (3, 5), (7, 6), (12, 15), (25, 19)] * 5:
        source = torch.randn(n, 8, generator=generator, dtype=torch.float64) + 0.3
        target = torch.randn(m, 8, generator=generator, dtype=torch.float64) + 0.3
        mask = torch.ones(n, m, dtype=torch.bool)
        log_plan = sinkhorn(log_dot_similarity(source, target), mask)
        expected = released_iter_max(log_plan.exp().numpy())
        assert np.array_equal(filter_alignments(log_plan, mask).numpy(), expected), (n, m)
        assert np.array_equal(subword_links("ot", source, target, mask).numpy(), expected), (n, m)


def test_a_later_round_never_links_a_row_and_a_column_both_already_aligned():
    # Round 1 links (0,0) and (1,1); row 0's best remaining entry is column 1 and column 1's is row 0,
    # so a round that only discounted them by alpha would link (0,1). Itermax's weight there is 0.
    plan = torch.tensor(
        [[0.50, 0.40, 0.05, 0.05], [0.10, 0.60, 0.20, 0.10], [0.05, 0.10, 0.45, 0.40], [0.35, 0.05, 0.10, 0.50]]
    )
    links = filter_alignments(plan.log(), torch.ones(4, 4, dtype=torch.bool), iterations=3, alpha=0.9)
    assert not links[0, 1]
    assert link_lists(links[None])[0] == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_mutual_argmax_ignores_padding():
    scores = torch.tensor([[[0.1, 0.9], [0.2, 0.3]]])
    mask = padded_mask([(2, 1)], 2, 2)  # column 1 is padding although it holds the largest score
    forward, backward = mutual_argmax(scores, mask)
    assert forward[0].tolist() == [[True, False], [True, False]]
    assert backward[0].tolist() == [[False, False], [True, False]]


def test_simalign_itermax_hand_worked_example_and_small_pairs():
    sim = torch.tensor([[0.9, 0.8, 0.1], [0.85, 0.2, 0.3], [0.1, 0.2, 0.7]])
    mask = torch.ones(3, 3, dtype=torch.bool)
    # Round 1 (argmax): {(0,0), (2,2)}. Round 2: row 1 and column 1 are free; weights 0.9 beside one free
    # line, 1 where both are free, 0 elsewhere: row 0 -> col 1 (0.72), col 1 -> row 0; row 1 -> col 0
    # (0.765), col 0 -> row 1. Both new links touch a free line.
    assert link_lists(simalign_itermax(sim[None], mask[None]))[0] == [(0, 0), (0, 1), (1, 0), (2, 2)]
    # A pair with at most 2 tokens on a side keeps plain argmax, as in SimAlign.
    small = sim[:2, :3][None]
    assert link_lists(simalign_itermax(small, mask[:2][None]))[0] == [(0, 0)]
    # Batched with padding equals one pair at a time.
    batch = torch.zeros(2, 3, 3)
    batch[0], batch[1, :2] = sim, sim[:2]
    both = simalign_itermax(batch, padded_mask([(3, 3), (2, 3)], 3, 3))
    assert link_lists(both) == [[(0, 0), (0, 1), (1, 0), (2, 2)], [(0, 0)]]


def test_softmax_extraction_needs_both_directions_above_the_threshold():
    # awesome-align: P_xy = softmax over each row (source -> target), P_yx over each column (target -> source).
    # Rows: [0.95, 0.05], [0.88, 0.12]; columns: [0.5, 0.5], [0.27, 0.73]. At 0.4 only (0, 0) and (1, 0)
    # pass both; (1, 1) passes the columns alone. The transpose must give the transposed links, which a
    # one-direction rule cannot: rows alone would link (0, 0), (0, 1) and (1, 1) of S^T.
    scores = torch.tensor([[3.0, 0.0], [3.0, 1.0]])
    full = torch.ones(2, 2, dtype=torch.bool)
    assert link_lists(softmax_links(scores, full, 0.4)[None]) == [[(0, 0), (1, 0)]]
    assert link_lists(softmax_links(scores.T, full, 0.4)[None]) == [[(0, 0), (0, 1)]]
    assert softmax_links(scores, full, 0.0).all()  # every probability is positive
    # Padding takes no probability mass: a padded copy has the same links.
    padded = torch.zeros(1, 3, 3)
    padded[0, :2, :2] = scores
    padded[0, 2], padded[0, :, 2] = 50.0, 50.0  # huge scores in the padding must not matter
    assert link_lists(softmax_links(padded, padded_mask([(2, 2)], 3, 3), 0.4)) == [[(0, 0), (1, 0)]]
    with pytest.raises(ValueError, match="threshold 1.5"):
        softmax_links(scores, full, 1.5)


def test_link_probabilities_are_awesome_aligns_tempered_harmonic_mean():
    # Dot products S = [[3, 0], [3, 1]] (source I, target rows [3, 3], [0, 1]); both sides have 2 tokens, so
    # both softmaxes run on S / sqrt(2): p = rows [0.893, 0.107], [0.804, 0.196]; q = columns [0.5, 0.5],
    # [0.330, 0.670]; 2pq / (p + q) gives the values below (0.6411 = 2 * 0.893 * 0.5 / 1.393).
    source, target = torch.eye(2), torch.tensor([[3.0, 3.0], [0.0, 1.0]])
    probabilities = link_probabilities(source, target, torch.ones(2, 2, dtype=torch.bool))
    expected = torch.tensor([[0.6411, 0.1617], [0.6167, 0.3027]])
    torch.testing.assert_close(probabilities, expected, atol=1e-4, rtol=0)
    # Padding neither takes mass nor gets any, and the temperature counts real tokens only.
    hs, ht = torch.zeros(1, 3, 2), torch.full((1, 4, 2), 9.0)
    hs[0, :2], ht[0, :2] = source, target
    padded = link_probabilities(hs, ht, padded_mask([(2, 2)], 3, 4))
    torch.testing.assert_close(padded[0, :2, :2], probabilities)
    assert padded[0, 2].sum() == 0 and padded[0, :, 2:].sum() == 0


def test_word_probability_is_the_largest_of_its_linked_tokens():
    # Source word 0 = tokens 0, 1; target word 0 = token 0, word 1 = tokens 1, 2; token 2 of the source is padding.
    values = torch.tensor([[[0.25, 0.75, 0.0], [0.5, 0.125, 0.375], [1.0, 1.0, 1.0]]])
    words = lift_max_to_words(values, pad_word_ids([[0, 0]], 3), pad_word_ids([[0, 1, 1]], 3), 1, 2)
    assert words.tolist() == [[[0.5, 0.75]]]
    links = torch.tensor([[[True, False], [False, True]]])
    assert word_level.values_at_links(links, torch.tensor([[[0.5, 0.0], [0.0, 0.25]]])) == [[0.5, 0.25]]


def test_every_method_is_batch_invariant():
    torch.manual_seed(2)
    lengths = [(5, 7), (3, 2), (6, 6)]
    hs, ht = torch.randn(3, 6, 8), torch.randn(3, 7, 8)
    mask = padded_mask(lengths, 6, 7)
    for method in ("ot", "argmax", "itermax", "softmax"):
        batched = link_lists(subword_links(method, hs, ht, mask))
        for b, (n, m) in enumerate(lengths):
            alone = subword_links(method, hs[b : b + 1, :n], ht[b : b + 1, :m], torch.ones(1, n, m, dtype=torch.bool))
            assert batched[b] == link_lists(alone)[0], method


# --- subword -> word ------------------------------------------------------------------------------------------


def test_side_positions_pick_each_rows_tokens_in_order():
    selected = torch.tensor([[False, True, True, False, False], [False, True, False, True, True]])
    index, mask = side_positions(selected)
    assert index.tolist() == [[1, 2, 0], [1, 3, 4]] and mask.tolist() == [[True, True, False], [True, True, True]]


def test_lifting_links_subwords_words_and_skips_padding():
    # Source words: 0 = tokens 0,1 ; 1 = token 2. Target words: 0 = token 0 ; 1 = tokens 1,2 ; 2 = token 3.
    links = torch.zeros(1, 4, 4, dtype=torch.bool)
    links[0, 1, 2] = links[0, 2, 3] = links[0, 3, 0] = True  # token 3 of the source is padding
    words = lift_to_words(links, pad_word_ids([[0, 0, 1]], 4), pad_word_ids([[0, 1, 1, 2]], 4), 2, 3)
    assert link_lists(words) == [[(0, 1), (1, 2)]]


def test_sentencepiece_word_boundaries_on_tricky_words(sample_prepared):
    from polyalign.tokenizer import load_tokenizer

    tok = load_tokenizer(sample_prepared / "tokenizer")
    sp = tok.sp
    # A character the vocabulary lacks becomes <unk> after a standalone "▁"; a zero-width space normalises to
    # nothing; punctuation gets its own "▁"; a word with an inner NFKC space stays one word.
    words = ["Köln", "☃", "\u200b", ".", "don't", "東京", "ﬁx"]
    ((ids, word_ids),) = tok.encode_words([words])
    pieces = [sp.id_to_piece(i) for i in ids]
    starts = [word_ids.index(w) for w in range(len(words))]
    assert word_ids == sorted(word_ids) and set(word_ids) == set(range(len(words)))
    for w, word in enumerate(words):
        own = [i for i, k in zip(ids, word_ids, strict=True) if k == w]
        assert own == (sp.encode(word) or [tok.special.unk]), word
        assert pieces[starts[w]].startswith("▁") or own == [tok.special.unk]
    snowman = [p for p, k in zip(pieces, word_ids, strict=True) if k == 1]
    assert snowman == ["▁", "<unk>"] or snowman == ["▁☃"]
    assert [i for i, k in zip(ids, word_ids, strict=True) if k == 2] == [tok.special.unk]
    # Lifting: a link from the snowman's standalone "▁" lands on word 1, not on its neighbours.
    n = len(ids)
    links = torch.zeros(1, n, 1, dtype=torch.bool)
    links[0, starts[1], 0] = True
    assert link_lists(lift_to_words(links, pad_word_ids([word_ids], n), pad_word_ids([[0]], 1), len(words), 1)) == [
        [(1, 0)]
    ]


# --- AER and gold files ---------------------------------------------------------------------------------------


def test_aer_equals_the_hand_computation():
    sure = [[(0, 0), (1, 1)], [(0, 0)]]
    possible = [[(0, 0), (1, 1), (1, 2), (2, 2)], [(0, 0)]]
    predicted = [[(0, 0), (1, 2), (2, 1)], []]
    # Sentence 1 alone: |A|=3, |S|=2, |A∩S|=1, |A∩P|=2 -> P=2/3, R=1/2, AER = 1 - 3/5 = 40%.
    one = alignment_error_rate(predicted[:1], sure[:1], possible[:1])
    assert (round(one.precision, 4), round(one.recall, 4), round(one.aer, 4)) == (66.6667, 50.0, 40.0)
    # Corpus level (counts pooled, not averaged): |S|=3 -> R=1/3, AER = 1 - 3/6 = 50%.
    both = alignment_error_rate(predicted, sure, possible)
    assert (round(both.precision, 4), round(both.recall, 4), round(both.aer, 4)) == (66.6667, 33.3333, 50.0)
    perfect = alignment_error_rate(sure, sure, possible)
    assert perfect.aer == 0.0 and perfect.precision == 100.0 and perfect.recall == 100.0


def write_gold(folder, src: str, tgt: str, gold: str):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "src.txt").write_text(src, encoding="utf-8")
    (folder / "tgt.txt").write_text(tgt, encoding="utf-8")
    (folder / "gold.txt").write_text(gold, encoding="utf-8")
    return folder


def test_gold_reader_separates_sure_and_possible(tmp_path):
    gold = read_gold(write_gold(tmp_path / "de-en", "a b\nc\n", "x y z\nw\n", "0-0 1?2 1-1\n\n"))
    assert gold.sure == [[(0, 0), (1, 1)], []] and gold.possible == [[(0, 0), (1, 1), (1, 2)], []]
    assert gold.languages == ("de", "en") and gold.source == [["a", "b"], ["c"]]


@pytest.mark.parametrize(
    ("src", "tgt", "gold", "message"),
    [
        ("a b\n", "x\n", "0-0 2-0\n", r"gold\.txt:1: link 2-0 is out of range: the sentence pair has 2 source"),
        ("a b\nc\n", "x\ny\n", "0-0\n1:0\n", r"gold\.txt:2: bad link '1:0'; write links as i-j"),
        ("a b\nc\n", "x\ny\n", "0-0\n", r"gold\.txt:2: gold\.txt has 1 lines but src\.txt has 2"),
        ("a b\nc\n", "x\n", "0-0\n", r"src\.txt:2: .*tgt\.txt ends after 1 lines"),
    ],
)
def test_gold_reader_errors_name_file_and_line(tmp_path, src, tgt, gold, message):
    with pytest.raises(DataError, match=message):
        read_gold(write_gold(tmp_path / "xx-yy", src, tgt, gold))


def test_aer_difference_interval_is_the_corpus_difference_with_a_paired_bootstrap():
    from polyalign.align.aer import aer_difference_interval, aer_from_counts, sentence_counts

    sure = [[(0, 0), (1, 1)], [(0, 1)], [(2, 2)]]
    possible = [[(0, 0), (1, 1), (1, 2)], [(0, 1)], [(2, 2)]]
    first = [[(0, 0)], [(0, 0)], [(2, 2)]]
    second = [[(0, 0), (1, 2)], [(0, 1)], [(2, 2)]]
    counts = sentence_counts(first, sure, possible)
    assert counts.tolist() == [[1, 1, 1, 2], [1, 0, 0, 1], [1, 1, 1, 1]]
    expected = alignment_error_rate(second, sure, possible).aer - alignment_error_rate(first, sure, possible).aer
    difference, low, high = aer_difference_interval(first, second, sure, possible, resamples=500)
    assert difference == pytest.approx(expected) and low <= difference <= high
    assert aer_from_counts(counts.sum(0)) == pytest.approx(alignment_error_rate(first, sure, possible).aer)
    same = aer_difference_interval(first, first, sure, possible, resamples=50)
    assert same == (0.0, 0.0, 0.0)  # paired: an aligner against itself differs on no draw
