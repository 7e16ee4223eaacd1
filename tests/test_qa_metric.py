"""QA metrics: XQuAD is scored exactly as the official SQuAD v1.1 script scores it (XTREME's protocol)."""

import re
import string
from collections import Counter

import pytest

from polyalign.finetune.qa import ExtractiveQA, QAExample, QAOptions
from polyalign.finetune.qa_metric import qa_scores


# The official SQuAD v1.1 evaluation script (evaluate-v1.1.py), verbatim but for layout: the reference.
def official_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    def lower(text):
        return text.lower()

    return white_space_fix(remove_articles(remove_punc(lower(s))))


def official_f1_score(prediction, ground_truth):
    prediction_tokens = official_normalize_answer(prediction).split()
    ground_truth_tokens = official_normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    f1 = (2 * precision * recall) / (precision + recall)
    return f1


def official_exact_match_score(prediction, ground_truth):
    return official_normalize_answer(prediction) == official_normalize_answer(ground_truth)


def official_metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    return max(metric_fn(prediction, gt) for gt in ground_truths)


TRICKY = [  # (prediction, gold answers)
    ("the Eiffel Tower", ["Eiffel Tower"]),
    ("An apple a day", ["apple day", "an apple"]),
    ("Theatre", ["the theatre"]),  # "the" inside a word stays
    ("«Paris»", ["Paris"]),  # non-ASCII punctuation is not removed by SQuAD v1.1
    ("U.S.A.", ["USA"]),
    ("  New\tYork \n City ", ["New York City"]),
    ("1,000 years", ["1000 years"]),
    ("Zürich—Bern", ["Zürich Bern"]),  # an em dash is not ASCII punctuation
    ("กรุงเทพมหานคร", ["กรุงเทพ"]),  # Thai: one whitespace token, no per-character credit
    ("北京大学", ["北京"]),
    ("", ["something"]),
    ("A", ["a"]),
    ("the the", ["the"]),  # both normalise to the empty string
    ("Mr. Smith's dog", ["mr smiths dog", "Smith"]),
]


def test_xquad_scores_equal_the_official_squad_v1_1_script():
    predictions, answers = [p for p, _ in TRICKY], [g for _, g in TRICKY]
    em = [official_metric_max_over_ground_truths(official_exact_match_score, p, g) for p, g in TRICKY]
    f1 = [official_metric_max_over_ground_truths(official_f1_score, p, g) for p, g in TRICKY]
    for language in ("en", "th", "zh", "de"):  # the SQuAD v1.1 script ignores the language
        ours = qa_scores(predictions, answers, language, QAOptions().scheme("xquad"))
        assert ours["exact_match"] == pytest.approx(100.0 * sum(em) / len(em))
        assert ours["f1"] == pytest.approx(100.0 * sum(f1) / len(f1))


def test_each_benchmark_is_scored_with_its_own_script_and_thai_characters_only_on_request(monkeypatch):
    task = ExtractiveQA()

    def score(prediction, gold, language, benchmark, options=None):
        if options is not None:
            task.options = options
        monkeypatch.setattr(task, "predictions", lambda *args: [prediction])
        example = QAExample("q", "?", gold, [gold], 0, language, benchmark)
        return task.score([example], [], [], language)

    # MLQA's script drops Unicode punctuation, SQuAD v1.1's only ASCII punctuation.
    assert score("Paris", "«Paris»", "de", "xquad")["exact_match"] == 0.0
    assert score("Paris", "«Paris»", "de", "mlqa")["exact_match"] == 100.0
    assert score("Paris", "«Paris»", "de", "xquad")["exact_match_mlqa"] == 100.0  # the other one, for reference
    # Thai per character: not in either script, only as the named option.
    assert score("กรุงเทพมหานคร", "กรุงเทพ", "th", "xquad")["f1"] == 0.0
    thai = QAOptions(normalisation="mlqa-thai-characters")
    assert score("กรุงเทพมหานคร", "กรุงเทพ", "th", "xquad", thai)["f1"] > 50
