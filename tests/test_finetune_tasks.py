"""Fine-tuning tasks, piece by piece: readers (file:line errors), heads, metrics, QA windows and decoding."""

import gzip
import json

import numpy as np
import pytest
import torch

from polyalign.finetune.pairs import PairClassificationHead, premise_groups, read_pair_tsv, split_indices, truncate_pair
from polyalign.finetune.qa import ExtractiveQA, QAExample, QAOptions, read_squad
from polyalign.finetune.qa_metric import exact_match, normalise_answer, qa_scores, token_f1
from polyalign.finetune.qa_spans import answer_token_span, context_windows, max_context_flags, piece_offsets
from polyalign.finetune.results import mean_std, transfer_gap
from polyalign.finetune.tokens import (
    NER_TAGS,
    UPOS_TAGS,
    TaggedSentence,
    TokenClassification,
    TokenSpec,
    entity_f1,
    read_conll,
    read_conllu,
    word_chunks,
)
from polyalign.io import DataError
from tests.conftest import shared_data

# ---------------------------------------------------------------------------------------------------------
# Readers


def test_pair_reader_reads_rows_and_names_the_bad_line(tmp_path):
    good = tmp_path / "dev-en.tsv"
    good.write_text("premise\thypothesis\tlabel\nA cat.\tAn animal.\tentailment\nA cat.\tA dog.\tcontradiction\n")
    rows = read_pair_tsv(good, ("premise", "hypothesis", "label"), ("entailment", "neutral", "contradiction"))
    assert rows == [("A cat.", "An animal.", 0), ("A cat.", "A dog.", 2)]
    bad = tmp_path / "bad.tsv.gz"
    with gzip.open(bad, "wt") as f:
        f.write("premise\thypothesis\tlabel\nA\tB\tentailment\nA\tB\tmaybe\n")
    with pytest.raises(DataError, match=r"bad\.tsv\.gz:3: label 'maybe' is not one of"):
        read_pair_tsv(bad, ("premise", "hypothesis", "label"), ("entailment", "neutral", "contradiction"))
    short = tmp_path / "short.tsv"
    short.write_text("premise\thypothesis\tlabel\nonly two\tcolumns\n")
    with pytest.raises(DataError, match=r"short\.tsv:2: expected 3 tab-separated columns"):
        read_pair_tsv(short, ("premise", "hypothesis", "label"), ("entailment",))


def test_held_out_split_keeps_premise_groups_together():
    rows = [(f"p{i // 3}", f"h{i}", 0) for i in range(30)]  # 10 premises x 3 hypotheses
    groups = premise_groups(rows)
    held, rest = split_indices(len(rows), groups, (0.2,))
    assert len(held) == 6 and len(rest) == 24
    assert {groups[i] for i in held}.isdisjoint({groups[i] for i in rest})
    assert split_indices(len(rows), groups, (0.2,)) == [held, rest]  # seeded: the same rows every time


def test_conll_and_conllu_readers(tmp_path):
    ner = tmp_path / "train.conll"
    ner.write_text("John\tB-PER\nlives\tO\n\nParis\tB-LOC\n")
    sentences = read_conll(ner, NER_TAGS, "en")
    assert [s.words for s in sentences] == [["John", "lives"], ["Paris"]]
    assert [NER_TAGS[t] for t in sentences[0].tags] == ["B-PER", "O"]
    ner.write_text("John\tB-PER\nlives\tB-XYZ\n")
    with pytest.raises(DataError, match=r"train\.conll:2: tag 'B-XYZ'"):
        read_conll(ner, NER_TAGS, "en")
    ud = tmp_path / "x.conllu"
    cols = "_\t_\t_\t_\t_\t_"
    ud.write_text(
        f"# text = Im Haus.\n1-2\tIm\t_\t_\t{cols}\n1\tIn\tin\tADP\t{cols}\n2\tdem\tder\tDET\t{cols}\n"
        f"3\tHaus\tHaus\tNOUN\t{cols}\n3.1\tx\tx\tX\t{cols}\n4\t.\t.\tPUNCT\t{cols}\n\n"
    )
    (s,) = read_conllu(ud, "de")
    assert s.words == ["In", "dem", "Haus", "."]  # the multiword token and the empty node are skipped
    assert [UPOS_TAGS[t] for t in s.tags] == ["ADP", "DET", "NOUN", "PUNCT"]
    ud.write_text(f"1\tIn\tin\tPREP\t{cols}\n")
    with pytest.raises(DataError, match=r"x\.conllu:1: UPOS 'PREP'"):
        read_conllu(ud, "de")


def test_squad_reader_and_its_errors(tmp_path):
    data = {"data": [{"paragraphs": [{"context": "Bern is the capital.", "qas": [
        {"id": "q1", "question": "Capital?", "answers": [{"text": "Bern", "answer_start": 0}]}]}]}]}  # fmt: skip
    path = tmp_path / "x.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(data, f)
    (e,) = read_squad(path, "en")
    assert (e.qid, e.answers, e.answer_start) == ("q1", ["Bern"], 0)
    del data["data"][0]["paragraphs"][0]["qas"][0]["question"]
    plain = tmp_path / "x.json"
    plain.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"x\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\]: missing 'question'"):
        read_squad(plain, "en")
    plain.write_text('{"data": [\n oops')
    with pytest.raises(DataError, match=r"x\.json:2: invalid JSON"):
        read_squad(plain, "en")
    path.write_text("{}")
    with pytest.raises(DataError, match=r"x\.json\.gz: not readable gzip data"):
        read_squad(path, "en")


# ---------------------------------------------------------------------------------------------------------
# Heads


def test_pair_head_pools_first_token_or_mean_of_real_tokens():
    torch.manual_seed(0)
    hidden = torch.randn(2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    first = PairClassificationHead(8, 3, "first").eval()
    mean = PairClassificationHead(8, 3, "mean").eval()
    mean.load_state_dict(first.state_dict())
    changed = hidden.clone()
    changed[0, 3:] = 100.0  # padding of row 0
    changed[1, 1:] = -5.0  # real tokens of row 1 other than the first
    assert torch.allclose(first(hidden, {"attention_mask": mask}), first(changed, {"attention_mask": mask}))
    out_mean = mean(changed, {"attention_mask": mask})
    assert torch.allclose(out_mean[0], mean(hidden, {"attention_mask": mask})[0])  # padding is ignored
    assert not torch.allclose(out_mean[1], mean(hidden, {"attention_mask": mask})[1])  # real tokens count


def test_truncate_pair_trims_the_longer_side_first():
    assert truncate_pair([1] * 10, [2] * 3, 8) == ([1] * 5, [2] * 3)
    assert truncate_pair([1] * 4, [2] * 4, 6) == ([1] * 3, [2] * 3)


# ---------------------------------------------------------------------------------------------------------
# Metrics


def test_mlqa_normalisation_hand_checked():
    # German: punctuation and the article "der" go; SQuAD's English rules keep "der".
    assert normalise_answer("Der Hund.", "de") == "hund"
    assert exact_match("Der Hund.", "Hund", "de") == 1.0
    assert exact_match("Der Hund.", "Hund", "de", "squad") == 0.0
    assert token_f1("Der Hund.", "Hund", "de", "squad") == pytest.approx(2 / 3)  # P 1/2, R 1
    # Spanish and Arabic articles; Unicode punctuation (« ») is removed by MLQA, not by SQuAD.
    assert exact_match("el perro", "perro", "es") == 1.0
    assert exact_match("الكتاب", "كتاب", "ar") == 1.0
    assert exact_match("«Paris»", "Paris", "fr") == 1.0 and exact_match("«Paris»", "Paris", "fr", "squad") == 0.0
    # Chinese: one token per character, so a longer span gets partial credit (SQuAD sees one token each).
    assert token_f1("北京大学", "北京", "zh") == pytest.approx(2 / 3)  # P 2/4, R 2/2
    assert token_f1("北京大学", "北京", "zh", "squad") == 0.0
    scores = qa_scores(["the Eiffel Tower", "Paris"], [["Eiffel Tower"], ["Lyon", "in Paris"]], "en", "mlqa")
    # Q1: EM 1 (article removed). Q2: best over answers: "in paris" vs "paris" -> F1 2/3, EM 0.
    assert scores["exact_match"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)


def test_seqeval_entity_f1_hand_checked():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    assert entity_f1(gold, [["B-PER", "I-PER", "O", "B-ORG"]]) == pytest.approx(50.0)  # 1 of 2 right both ways
    assert entity_f1(gold, [["B-PER", "O", "O", "B-LOC"]]) == pytest.approx(50.0)  # a partial span is wrong
    assert entity_f1(gold, gold) == pytest.approx(100.0)


def test_transfer_gap_and_seed_statistics():
    assert transfer_gap({"en": 80.0, "de": 70.0, "fr": 60.0}) == pytest.approx(15.0)
    assert transfer_gap({"de": 70.0}) is None
    assert mean_std([70.0, 72.0, 74.0]) == {"mean": 72.0, "std": 2.0}
    assert mean_std([70.0]) == {"mean": 70.0, "std": 0.0}


# ---------------------------------------------------------------------------------------------------------
# Token classification: labels on first subwords, long sentences in chunks


class FakeLoaded:
    """Just what features() reads from a LoadedModel."""

    def __init__(self, tokenizer, num_languages=0):
        from types import SimpleNamespace

        self.tokenizer = tokenizer
        self.model = SimpleNamespace(config=SimpleNamespace(num_languages=num_languages))

    def language_id(self, code):
        return None


class CharTokenizer:
    """A toy tokenizer: every character is a piece; a word's first piece carries the "▁" marker."""

    def __init__(self):
        from polyalign.tokenizer import SpecialTokens

        self.special = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=300)
        self.pieces = {}

    def _id(self, piece):
        return self.pieces.setdefault(piece, 5 + len(self.pieces))

    def encode_words(self, sentences):
        out = []
        for words in sentences:
            ids, word_ids = [], []
            for w, word in enumerate(words):
                for k, ch in enumerate(word):
                    ids.append(self._id(("\u2581" if k == 0 else "") + ch))
                    word_ids.append(w)
            out.append((ids, word_ids))
        return out

    def encode_batch(self, texts):
        return [self.encode_words([t.split()])[0][0] for t in texts]

    def id_to_piece(self, i):
        return {v: k for k, v in self.pieces.items()}.get(i, "<unk>")


def test_token_labels_sit_on_first_subwords_and_long_sentences_are_chunked():
    spec = TokenSpec("pos", "accuracy", UPOS_TAGS, load=None)
    task = TokenClassification(spec)
    sentence = TaggedSentence(["abc", "de", "f", "ghij"], [7, 1, 12, 15], "en")  # 4 words, 10 pieces
    loaded = FakeLoaded(CharTokenizer())
    (one,) = task.features([sentence], loaded, max_length=32, train=True)
    assert one.extra["labels"] == [-100, 7, -100, -100, 1, -100, 12, 15, -100, -100, -100, -100]
    chunks = task.features([sentence], loaded, max_length=8, train=False)  # 6 pieces per row at most
    assert [c.length - 2 for c in chunks] == [6, 4]  # cut after "f", a word boundary
    assert word_chunks([0, 0, 0, 1, 1, 2, 3, 3, 3, 3], 6) == [(0, 6), (6, 10)]
    # Predicting the gold tag at every first subword gives 100% after the chunks are joined again.
    outputs = [np.array([lab for lab in c.extra["labels"] if lab != -100]) for c in chunks]
    assert task.score([sentence], chunks, outputs, "en") == {"accuracy": 100.0}


# ---------------------------------------------------------------------------------------------------------
# QA: characters <-> tokens, windows, decoding


def test_piece_offsets_follow_piece_lengths_through_normalisation_and_unknowns():
    assert piece_offsets("308,", ["\u2581308", ","]) == [(0, 3), (3, 4)]
    assert piece_offsets("北京，大学", ["\u2581北京", ",", "大学"]) == [(0, 2), (2, 3), (3, 5)]  # NFKC "，" -> ","
    assert piece_offsets("a\u2603b", ["\u2581a", "<unk>", "b"]) == [(0, 1), (1, 2), (2, 3)]  # <unk> fills the gap
    assert piece_offsets("abc", ["\u2581", "abc"]) == [(0, 0), (0, 3)]  # a bare "▁" has no width
    assert answer_token_span([(0, 3), (4, 9), (10, 12), (12, 13)], 4, 12) == (1, 2)


def test_windows_and_max_context():
    assert context_windows(10, 4, 3) == [(0, 4), (3, 7), (6, 10)]
    windows = context_windows(10, 6, 2)
    assert windows == [(0, 6), (2, 8), (4, 10)]
    flags = max_context_flags(windows)
    # Each token counts in the window where it is furthest from both edges (token 4: 2 tokens each side in
    # the second window, 1 in the first).
    assert flags == [[True] * 4 + [False] * 2, [False, False, True, True, False, False], [False] * 2 + [True] * 4]


def test_qa_answer_across_a_window_boundary_is_found():
    context = "one two three four five six seven eight nine ten eleven twelve"
    answer = "seven eight"
    example = QAExample("q", "which", context, [answer], context.index(answer), "en")
    task = ExtractiveQA(QAOptions(doc_stride=8, n_best=5))
    loaded = FakeLoaded(CharTokenizer())
    features = task.features([example], loaded, max_length=33, train=True)  # 25 context pieces per window
    windows = [f.extra["window"] for f in features]
    spans = features[0].extra["spans"]
    a, b = answer_token_span(spans, example.answer_start, example.answer_start + len(answer))
    first = windows[0]
    assert first[0] <= a < first[1] <= b, "the answer must straddle the end of the first window"
    hits = [f for f in features if f.extra["target"] != (0, 0)]
    assert hits, "a later window contains the whole answer"
    # Targets map back to the answer's characters ...
    for f in hits:
        s, k = f.extra["window"][0], f.extra["offset"]
        t0, t1 = f.extra["target"][0] - k + s, f.extra["target"][1] - k + s
        assert context[spans[t0][0] : spans[t1][1]] == answer
    # ... and logits peaked at them decode to the exact answer text, even though window 1 prefers a wrong span.
    outputs = []
    for f in features:
        logits = np.zeros((2, f.length), dtype=np.float32)
        start, end = f.extra["target"]
        if (start, end) != (0, 0):
            logits[0, start], logits[1, end] = 5.0, 5.0
        else:
            k = f.extra["offset"]
            logits[0, k], logits[1, k] = 3.0, 3.0  # a weaker span elsewhere
        outputs.append(logits)
    assert task.predictions([example], features, outputs) == [answer]
    assert task.score([example], features, outputs, "en")["exact_match"] == 100.0


# ---------------------------------------------------------------------------------------------------------
# The real files in the pack (skipped when ../shared/data is absent)


@pytest.mark.data
def test_real_files_read_cleanly():
    from polyalign.finetune.pairs import PAWSX_HEADER, PAWSX_LABELS, XNLI_HEADER, XNLI_LABELS

    ev = shared_data("eval")
    assert len(read_pair_tsv(ev / "xnli" / "dev-en.tsv.gz", XNLI_HEADER, XNLI_LABELS)) == 2490
    assert len(read_pair_tsv(ev / "pawsx" / "test-zh.tsv", PAWSX_HEADER, PAWSX_LABELS)) == 2000
    assert sum(len(s.words) for s in read_conllu(ev / "ud" / "pud" / "en_pud-ud-test.conllu.gz", "en")) == 21180
    assert len(read_conll(ev / "wikiann" / "sw" / "dev.conll.gz", NER_TAGS, "sw")) == 1000
    assert len(read_squad(ev / "qa" / "xquad" / "xquad.th.json.gz", "th")) == 1190
