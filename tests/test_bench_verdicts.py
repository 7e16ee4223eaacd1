"""The verdict rule (bench/verdict.py), each case with its opposite: paired differences, noise floors, a second
seed, the compute trend, a comparison's row, and the unigram floor."""

import json
import math

import numpy as np
import pytest

from bench import budget as B
from bench import verdict as V
from bench.floors import unigram_floor
from bench.measures import ONE_CLASS, current_key
from bench.reporting import page_text, table_rows
from bench.sections import seeds_to_run
from bench.studies import evidence as E
from tests.bench_sections import ALL, CURRENT_AER, STUDY, section_of


def test_difference_is_paired_by_seed_and_spread_is_half_the_range():
    d = V.difference([10.0, 20.0], [9.0, 21.0])  # per-seed differences +1 and -1
    assert (d.mean, d.spread, d.seeds) == (0.0, 1.0, 2)
    d = V.difference([5.0, 7.0], [4.0])  # an untrained start model pairs with every seed
    assert (d.mean, d.spread) == (2.0, 1.0)


@pytest.mark.parametrize(
    "method, baseline, direction, expected",
    [
        ([13.0, 13.4], [10.0, 10.0], 1, V.REPRODUCED),
        ([13.0, 13.4], [10.0, 10.0], -1, V.NOT_REPRODUCED),  # the paper wants lower (AER): the wrong way
        ([7.0, 7.4], [10.0, 10.0], -1, V.REPRODUCED),
        ([11.0, 9.8], [10.0, 10.0], 1, V.INCONCLUSIVE),  # mean +0.4 inside the spread 0.6
        ([9.0, 8.0], [10.0, 10.0], 1, V.NOT_REPRODUCED),
        ([11.5], [10.0], 1, V.INCONCLUSIVE),  # one seed, under 2 points
        ([12.5], [10.0], 1, V.REPRODUCED),
        ([7.5], [10.0], 1, V.NOT_REPRODUCED),
    ],
)
def test_verdict(method, baseline, direction, expected):
    assert V.verdict(V.difference(method, baseline), direction) == expected


def test_an_unseeded_comparison_is_decided_by_its_sign():
    assert V.verdict(V.difference([20.3], [20.0]), 1, varies=False) == V.REPRODUCED
    assert V.verdict(V.difference([20.3], [20.0]), 1, varies=True) == V.INCONCLUSIVE


def test_a_difference_within_the_noise_floor_is_inconclusive_however_steady_the_seeds():
    steady = V.difference([1.75, 1.73], [1.61])
    assert V.verdict(steady, 1) == V.REPRODUCED and V.verdict(steady, 1, floor=E.NOISE_FLOOR) == V.INCONCLUSIVE
    assert V.verdict(V.difference([3.0, 3.1], [1.6]), 1, floor=E.NOISE_FLOOR) == V.REPRODUCED
    xnli = [c for c in ALL if c.metric == "xnli"]  # 1,500 test pairs near chance: a wider floor
    assert xnli and all(c.rule.floor == E.XNLI_SMOKE_FLOOR for c in xnli)


def test_second_seed_only_for_close_differences():
    assert V.needs_second_seed(V.difference([11.9], [10.0])) and not V.needs_second_seed(V.difference([12.1], [10.0]))
    assert not V.needs_second_seed(V.difference([11.0, 11.0], [10.0, 10.0]))
    results = {
        "start": {"0": {"tatoeba14@dev": 1.0}},
        "exp2-mlm-tlm": {"0": {"tatoeba14@dev": 2.0}},
        "exp3-camlm": {"0": {"tatoeba14@dev": 2.5}},  # close: +0.5
        "exp4-camlm-btmlm": {"0": {"tatoeba14@dev": 9.0, "pseudo": 30.0, "pseudo-copy": 10.0}},  # far
    }
    assert seeds_to_run(STUDY.sections()["ernie-m"], results) == {"exp2-mlm-tlm", "exp3-camlm"}


def test_the_compute_trend_needs_a_move_beyond_both_spreads():
    assert V.compute_trend(-1, [(4.0, 0.1), (1.0, None)]) == 1  # AER gap closing: the paper's way
    assert V.compute_trend(-1, [(4.0, 0.1), (12.8, None)]) == -1
    assert V.compute_trend(-1, [(4.0, 1.0), (3.5, 1.0)]) == 0 and V.compute_trend(-1, [(4.0, 0.1)]) == 0


def test_a_row_pairs_the_seeds_both_arms_have_and_is_not_run_without_a_section():
    c, section = section_of(
        "ppa-no-moco",
        {
            "ppa": {"0": {"tatoeba14@last": 4.0}, "1": {"tatoeba14@last": 4.2}},
            "ppa-no-moco": {"0": {"tatoeba14@last": 8.0}},
        },
    )
    row = V.comparison_row(c, section)
    assert (row["baseline"], row["method"], row["seeds"], row["verdict"]) == ([4.0], [8.0], 1, V.NOT_REPRODUCED)
    assert V.comparison_row(c, None)["verdict"] == V.NOT_RUN
    assert V.comparison_row(c, {"results": {}})["verdict"] == V.NOT_MEASURED


def test_stale_aer_and_one_class_classifiers_are_not_read():
    c, section = section_of(
        "xlm-align-ot-vs-argmax-default",
        {"dwa": {"0": {"aer-ot@default": 80.0, "aer-argmax@default": 82.0, **CURRENT_AER}}},
    )
    assert V.comparison_row(c, section)["verdict"] == V.REPRODUCED
    for side in ("aer-ot", "aer-argmax"):  # either side measured under an older protocol
        seed = section["results"]["dwa"]["0"]
        seed |= {**CURRENT_AER, current_key(side): False}
        assert V.comparison_row(c, section)["verdict"] == V.STALE
    c, section = section_of(
        "xlm-e-xnli", {"xlm": {"0": {"xnli": 31.5, ONE_CLASS: False}}, "xlm-e": {"0": {"xnli": 38.0, ONE_CLASS: True}}}
    )
    assert V.comparison_row(c, section)["verdict"] == V.ONE_CLASS_VERDICT
    section["results"]["xlm-e"]["0"][ONE_CLASS] = False
    assert V.comparison_row(c, section)["verdict"] == V.REPRODUCED


def test_an_arm_stopped_short_of_a_flop_budget_makes_the_comparison_inconclusive():
    c, section = section_of(
        "xlm-e-gpu-aer-ot",
        {
            "xlm-gpu": {"0": {"aer-ot@default": 79.0, **CURRENT_AER, "train": {"flops": 3.0e16}}},
            "xlm-e-gpu": {"0": {"aer-ot@default": 70.0, **CURRENT_AER, "train": {"flops": 2.9e16}}},
        },
    )
    assert V.comparison_row(c, section)["verdict"] == V.REPRODUCED  # 97% of the budget: equal compute
    section["results"]["xlm-e-gpu"]["0"]["train"]["flops"] = 1.92e16  # the GPU run's 3-minute guard
    verdict = V.comparison_row(c, section)["verdict"]
    assert verdict.startswith(V.INCONCLUSIVE) and "xlm-e-gpu logged 64%" in verdict


def test_the_unigram_floor_is_per_language_entropy_weighted_by_tokens(tmp_path):
    assert V.entropy(np.array([5, 5, 5, 5, 0])) == pytest.approx(math.log(4))
    # two languages with disjoint vocabularies: pooling them would add ln 2, the language already tells it
    assert V.conditional_entropy({"en": np.array([3, 3, 0, 0]), "de": np.array([0, 0, 1, 1])}) == pytest.approx(
        math.log(2)
    )
    prepared = tmp_path / "prepared"
    (prepared / "mono").mkdir(parents=True)
    (prepared / "parallel").mkdir()
    (prepared / "meta.json").write_text(json.dumps({"dtype": "uint16", "vocab_size": 8, "languages": ["en", "de"]}))
    np.array([1, 1, 2, 2], dtype=np.uint16).tofile(prepared / "mono" / "en.ids")
    np.array([3, 3], dtype=np.uint16).tofile(prepared / "parallel" / "en-de.en.ids")  # the parallel side counts
    np.array([5, 5, 5, 5, 5, 5], dtype=np.uint16).tofile(prepared / "mono" / "de.ids")
    assert unigram_floor("unigram:en", prepared, None) == pytest.approx(math.log(3))
    assert unigram_floor("unigram", prepared, None) == pytest.approx(math.log(3) / 2)  # en 6 tokens at ln 3, de at 0
    assert unigram_floor("unigram", prepared, ("en",)) == pytest.approx(math.log(3))
    with pytest.raises(ValueError, match="floor"):
        unigram_floor("bigram", prepared, None)


def test_a_loss_that_still_falls_in_its_last_quarter_is_told_from_a_flat_one():
    assert B.quarter_means([4.0, 4.0, 3.0, 3.0, 2.0, 2.0, 1.0, 1.0, 1.0]) == [4.0, 3.0, 2.0, 1.0]
    assert B.quarter_means([1.0, 2.0, 3.0]) == []  # too short to have quarters
    assert B.loss_trend([10.0, 9.0, 8.00, 7.95]) == "flat"  # 0.6% of the loss
    assert B.loss_trend([10.0, 9.0, 8.00, 7.80]) == "still falling"  # 2.6%: the budget is in question
    assert B.loss_trend([10.0, 9.0, 8.00, 8.20]) == "rising"
    assert B.loss_trend([]) == "-"


def test_the_budget_table_lists_each_trained_run_once_with_its_head_warmup_apart():
    from bench.page import budget_table

    warm = {"steps": 200, "loss": [13.4, 8.5], "tokens": 204_800, "seconds": 168.0}
    quarters = {"mlm": [9.0, 8.5, 8.2, 8.19], "btmlm": [9.0, 8.5, 8.2, 7.9]}  # BTMLM still falling
    train = {"steps": 200, "tokens": 288_914, "seconds": 750.0, "loss_quarters": quarters}
    old = {"steps": 200, "seconds": 480.0}  # summarised before tokens and quarters were kept
    section = {"results": {"start": {"0": {"x": 1.0}}, "a": {"0": {"train": train, "head_warmup": warm}},
                           "b": {"0": {"train": old}}}}  # fmt: skip
    rows = table_rows(page_text(budget_table({"s1": section, "s2": section})))
    names = [row[0] for row in rows]
    assert names.count("s1: `a`") == 1 and not any("`start`" in n for n in names)  # shared runs once; untrained: none
    a = next(row for row in rows if row[0] == "s1: `a`")
    assert a[:6] == ["s1: `a`", "0", "200 steps, MLM loss 13.40 -> 8.50 (204,800 tokens, 2.8 min)", "200", "288,914",
                     "12.5"]  # fmt: skip
    assert a[6:] == ["mlm 9.00 / 8.50 / 8.20 / 8.19<br>btmlm 9.00 / 8.50 / 8.20 / 7.90", "btmlm still falling"]
    quarters["btmlm"] = [9.0, 8.5, 8.2, 8.2]
    assert table_rows(page_text(budget_table({"s1": section})))[1][-1] == "flat"
    assert ["s1: `b`", "0", "-", "200", "-", "8.0", "-", "-"] in rows
    assert budget_table({"s": {"results": {"b": {"0": {"train": old}}}}}) == []  # no run logged its tokens
