"""PPA §2.3 code-switching for translate-train fine-tuning: the example rewrite (finetune/code_switch.py), the
loop's batching that keeps code-switched partners together (loop.training_batches), the task loaders, and
`polyalign finetune ... --setting translate-train-all --code-switch` end to end on tiny files."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from polyalign.cli import main
from polyalign.finetune import Subsample, build_task, finetune_task
from polyalign.finetune.base import Feature
from polyalign.finetune.code_switch import code_switch, code_switch_training_set
from polyalign.finetune.loop import feature_groups, training_batches
from polyalign.finetune.pairs import PAIR_SIDES, PairExample
from polyalign.finetune.qa import MLQA_LANGUAGES, QA_SIDES, QAExample, QAOptions
from polyalign.io import DataError
from polyalign.languages import XNLI_LANGUAGES
from tests import test_finetune_loop
from tests.test_finetune_loop import _write, write_pack

tiny_model = test_finetune_loop.tiny_model  # the fixture: a tiny encoder with language embeddings

NLI_ES = PairExample("p_es", "h_es", 2, "es", "dev:7", "es")
NLI_EN = PairExample("p_en", "h_en", 2, "en", "dev:7", "en")

# ---------------------------------------------------------------------------------------------------------
# The rewrite


def test_code_switching_produces_exactly_the_two_mixed_pairs():
    mixed = code_switch(NLI_ES, NLI_EN, *PAIR_SIDES)
    assert mixed == (
        PairExample("p_es", "h_en", 2, "es", "dev:7", "en"),  # (a_xx, b_en)
        PairExample("p_en", "h_es", 2, "en", "dev:7", "es"),  # (a_en, b_xx): each side keeps its language
    )
    assert NLI_ES not in mixed and NLI_EN not in mixed  # neither original is used
    assert (NLI_ES.first, NLI_ES.second, NLI_ES.second_language) == ("p_es", "h_es", "es")  # inputs untouched


def test_the_answer_span_moves_with_the_context():
    qa_de = QAExample("x1", "q_de", "Der Fluss: 1850", ["1850"], 11, "de", "mlqa", "de")
    qa_en = QAExample("x1", "q_en", "In the year 1850", ["1850"], 12, "en", "mlqa", "en")
    q_de_c_en, q_en_c_de = code_switch(qa_de, qa_en, *QA_SIDES)
    assert q_de_c_en == QAExample("x1", "q_de", "In the year 1850", ["1850"], 12, "en", "mlqa", "de")
    assert q_en_c_de == QAExample("x1", "q_en", "Der Fluss: 1850", ["1850"], 11, "de", "mlqa", "en")


def test_training_set_keeps_english_and_pairs_up_each_translation():
    fr = PairExample("p_fr", "h_fr", 2, "fr", "dev:7", "fr")
    orphan = PairExample("p_de", "h_de", 0, "de", "dev:9", "de")  # its English original is not given
    out, missing = code_switch_training_set([NLI_EN, NLI_ES, fr, orphan], {"dev:7": NLI_EN}, "pair_id", *PAIR_SIDES)
    assert out[0] == NLI_EN and out[0].group is None  # English stays as it is, alone
    assert [(e.first, e.second, e.group) for e in out[1:]] == [
        ("p_es", "h_en", "dev:7:es"),
        ("p_en", "h_es", "dev:7:es"),
        ("p_fr", "h_en", "dev:7:fr"),
        ("p_en", "h_fr", "dev:7:fr"),
    ]
    assert missing == 1


# ---------------------------------------------------------------------------------------------------------
# The loop's batching


def test_training_batches_never_split_a_group_and_cover_every_feature():
    features = [Feature([0], group=f"g{i // 2}") for i in range(50)] + [Feature([0]) for _ in range(7)]
    groups = feature_groups(features)
    assert len(groups) == 25 + 7 and all(len(g) == 2 for g in groups[:25])
    stream = training_batches(groups, batch_size=5, rng=np.random.default_rng(0))  # odd: a flat stream would split
    batches = [next(stream) for _ in range(60)]
    assert all(0 < len(b) <= 5 for b in batches)
    for b in batches:
        assert all(n == 2 for g, n in Counter(features[i].group for i in b).items() if g is not None), b
    seen = Counter(i for b in batches for i in b)
    assert set(seen) == set(range(57)) and max(seen.values()) - min(seen.values()) <= 1  # reshuffled passes


def test_groups_of_one_give_the_plain_reshuffled_stream():
    """Without code-switching, training batches are what the loop drew before groups existed."""
    stream = training_batches([[i] for i in range(10)], batch_size=4, rng=np.random.default_rng(3))
    rng = np.random.default_rng(3)
    flat = np.concatenate([rng.permutation(10) for _ in range(2)]).tolist()
    assert [next(stream) for _ in range(5)] == [flat[k : k + 4] for k in range(0, 20, 4)]


def test_a_group_larger_than_the_batch_is_refused():
    with pytest.raises(DataError, match="batch_size=2 is smaller than a group of 3"):
        next(training_batches([[0, 1, 2], [3]], 2, np.random.default_rng(0)))


# ---------------------------------------------------------------------------------------------------------
# Tasks, on tiny files in the real formats whose every sentence says its language


def write_code_switch_pack(root: Path) -> Path:
    """The tiny pack, with XNLI dev rows and MLQA questions that are "translations" marked by language."""
    write_pack(root)
    for lang in XNLI_LANGUAGES:
        rows = ["premise\thypothesis\tlabel"]
        for p in range(5):
            for label, word in (("entailment", "yes"), ("neutral", "maybe"), ("contradiction", "no")):
                rows.append(f"{lang} house {p} is near the river .\t{lang} answer is {word} .\t{label}")
        _write(root / "xnli" / f"dev-{lang}.tsv.gz", "\n".join(rows) + "\n")
    for k, lang in enumerate(MLQA_LANGUAGES):
        context = f"{lang} " + "old " * k + "bridge was built in 1850 by the town ."  # the answer moves
        answer = {"text": "1850", "answer_start": context.index("1850")}
        qas = [{"id": f"q{i}", "question": f"{lang} when {i} ?", "answers": [answer]} for i in range(10)]
        squad = {"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}
        _write(root / "qa" / "mlqa" / "dev" / f"dev-context-{lang}-question-{lang}.json.gz", json.dumps(squad))
    return root


@pytest.fixture(scope="module")
def switch_pack(tmp_path_factory) -> Path:
    return write_code_switch_pack(tmp_path_factory.mktemp("switch-pack"))


def language_of(text: str) -> str:
    return text.split()[0]


def test_pair_loader_code_switches_every_translated_training_pair(switch_pack):
    task = build_task("xnli")
    plain = task.load(switch_pack, "translate-train-all", Subsample())
    task.options.code_switch = True
    data = task.load(switch_pack, "translate-train-all", Subsample())
    english = [e for e in plain.train if e.language == "en"]
    assert len(data.train) == len(english) + 2 * (len(plain.train) - len(english))
    assert f"{len(plain.train)} -> {len(data.train)} training examples" in data.protocol
    by_group: dict = {}
    for e in data.train:
        sides = (language_of(e.first), language_of(e.second))
        assert sides == (e.language, e.second_language)  # each side carries its own language
        if e.group is None:
            assert sides == ("en", "en")
        else:
            by_group.setdefault(e.group, []).append((sides, e.pair_id, e.label))
    assert len(by_group) == len(plain.train) - len(english)
    for group, ((sides1, id1, label1), (sides2, id2, label2)) in by_group.items():
        xx = group.rsplit(":", 1)[1]
        assert xx != "en" and (sides1, sides2) == ((xx, "en"), ("en", xx))  # never (a_xx, b_xx)
        assert id1 == id2 and label1 == label2  # the same row, the same label


def test_qa_loader_code_switches_questions_and_moves_answers(switch_pack, tiny_model):
    from polyalign.checkpoint import load_model

    task = build_task("qa")
    task.options = QAOptions(code_switch=True)
    data = task.load(switch_pack, "translate-train-all", Subsample())
    translated = [e for e in data.train if e.group is not None]
    assert len(translated) == 2 * 8 * (len(MLQA_LANGUAGES) - 1)  # 8 of 10 questions train, in 6 languages
    for e in data.train:
        assert e.context[e.answer_start : e.answer_start + 4] == "1850"  # the span found in its own context
        sides = (language_of(e.question), language_of(e.context))
        assert sides == (e.question_language, e.language)  # the context carries its language (and answer)
        assert sides == ("en", "en") if e.group is None else "en" in sides and len(set(sides)) == 2
    loaded = load_model(tiny_model)
    features = task.features(data.train, loaded, 64, train=True)
    assert len(features) == len(data.train)  # one window each, and no answer lost
    assert all(f.extra["target"] != (0, 0) for f in features)


@pytest.mark.integration
@pytest.mark.parametrize("name", ["xnli", "qa"])
def test_finetuning_trains_code_switched_partners_in_the_same_batch(name, switch_pack, tiny_model):
    from polyalign.checkpoint import load_model

    task = build_task(name)
    batches = []
    collate = task.collate

    def recording_collate(features, special):
        batches.append([f.group for f in features])
        return collate(features, special)

    task.collate = recording_collate
    overrides = ["finetune.epochs=1", "finetune.batch_size=3", "finetune.max_length=64", "task.code_switch=true"]
    sample = Subsample(max_train=24, max_select=3, max_eval=2)
    loaded = load_model(tiny_model)
    result = finetune_task(loaded, task, switch_pack, "translate-train-all", 1, overrides, sample, progress=False)
    assert "Code-switched (PPA §2.3)" in result["protocol"] and result["config"]["task_options"]["code_switch"]
    grouped = [Counter(g for g in b if g is not None) for b in batches]
    assert sum(len(c) for c in grouped) > 5  # code-switched pairs were trained on
    assert all(n == 2 for c in grouped for n in c.values()), grouped


# ---------------------------------------------------------------------------------------------------------
# CLI


@pytest.mark.integration
def test_cli_finetune_translate_train_all_with_code_switching(switch_pack, tiny_model, tmp_path):
    from typer.testing import CliRunner

    from polyalign.cli import app

    args = ["finetune", "pawsx", "--model", str(tiny_model), "--data", str(switch_pack), "--seeds", "1",
            "--setting", "translate-train-all", "--code-switch", "--max-train", "6", "--max-select", "2",
            "--max-eval", "2", "--no-progress", "--set", "finetune.epochs=0.5", "--set", "finetune.batch_size=4",
            "--set", "finetune.max_length=64", "--out", str(tmp_path / "ft")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    result = json.loads((tmp_path / "ft" / "finetune.json").read_text())["results"][0]
    assert result["setting"] == "translate-train-all" and result["config"]["task_options"]["code_switch"] is True
    assert result["runs"][0]["steps"] == 2  # 6 training pairs -> 10 to 12 examples, batches of 4, half an epoch
    assert "Code-switched (PPA §2.3)" in (tmp_path / "ft" / "finetune.md").read_text()


@pytest.mark.parametrize(
    ("task", "setting", "expected"),
    [
        ("xnli", "transfer", "use --setting translate-train-all (not transfer)"),
        ("ner", "transfer", "ner has no code-switching"),
    ],
)
def test_cli_code_switching_where_it_does_not_apply_is_one_line_exit_2(
    task, setting, expected, switch_pack, tiny_model, capsys
):
    with pytest.raises(SystemExit) as exit_info:
        main(["finetune", task, "--model", str(tiny_model), "--data", str(switch_pack), "--setting", setting,
              "--code-switch", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err.count("\n") == 0 and expected in err, err
