"""The fine-tuning loop on tiny task files written in the real formats: optimizer groups, a learnability check,
a 2-step smoke test per task, the method hooks, and the CLI."""

import gzip
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from polyalign.checkpoint import load_model, save_model_folder
from polyalign.finetune import Subsample, build_task, finetune_task
from polyalign.finetune.base import EncoderAdapter
from polyalign.finetune.loop import FinetuneConfig, build_task_model, parameter_groups
from polyalign.finetune.qa import MLQA_LANGUAGES, XQUAD_LANGUAGES
from polyalign.io import DataError
from polyalign.languages import XNLI_LANGUAGES
from polyalign.model import MaskedLanguageModel
from polyalign.tokenizer import load_tokenizer
from tests.conftest import tiny_config

SMALL = ["finetune.epochs=2", "finetune.batch_size=4", "finetune.max_length=64"]

# ---------------------------------------------------------------------------------------------------------
# Tiny model and tiny data pack


@pytest.fixture(scope="session")
def tiny_model(sample_prepared, tmp_path_factory) -> Path:
    """A tiny encoder with language embeddings and the sample corpus's tokenizer."""
    tok = load_tokenizer(sample_prepared / "tokenizer")
    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=tok.special.vocab_size, pad_token_id=tok.special.pad, num_languages=3, max_positions=128
    )
    folder = tmp_path_factory.mktemp("models") / "tiny"
    save_model_folder(folder, MaskedLanguageModel(config), tok, ["en", "de", "zh"])
    return folder


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


WORDS = ("yes", "maybe", "no")  # the hypothesis word decides the XNLI label in the tiny pack: learnable


def xnli_rows(n_premises: int, offset: int = 0) -> str:
    rows = ["premise\thypothesis\tlabel"]
    for p in range(n_premises):
        for label, word in zip(("entailment", "neutral", "contradiction"), WORDS, strict=True):
            rows.append(f"The house {p + offset} is near the river.\tThe answer is {word} for house {p}.\t{label}")
    return "\n".join(rows) + "\n"


def write_pack(root: Path, xnli_premises: int = 5) -> Path:
    for lang in XNLI_LANGUAGES:
        _write(root / "xnli" / f"dev-{lang}.tsv.gz", xnli_rows(xnli_premises))
        _write(root / "xnli" / f"test-{lang}.tsv.gz", xnli_rows(max(2, xnli_premises // 2), offset=1000))
    second = ("A river has the city .", "The city has a river .")
    paws = ["sentence1\tsentence2\tlabel"] + [
        f"The city {i} has a river .\t{second[i % 2]}\t{i % 2}" for i in range(20)
    ]
    for lang in ("en", "de", "es", "fr", "ja", "ko", "zh"):
        _write(root / "pawsx" / f"dev-{lang}.tsv", "\n".join(paws) + "\n")
    for lang in ("de", "zh"):
        _write(root / "pawsx" / f"test-{lang}.tsv", "\n".join(paws[:7]) + "\n")
    conll = "John\tB-PER\nSmith\tI-PER\nlives\tO\nin\tO\nParis\tB-LOC\n.\tO\n\nThe\tO\nbank\tB-ORG\nopened\tO\n\n"
    for lang in ("en", "de"):
        for split in ("train", "dev", "test"):
            _write(root / "wikiann" / lang / f"{split}.conll.gz", conll * 3)
    c = "_\t_\t_\t_\t_\t_"
    words = (("The", "DET"), ("cat", "NOUN"), ("sleeps", "VERB"), (".", "PUNCT"))
    conllu = (
        "# text = The cat sleeps.\n" + "".join(f"{i}\t{w}\t{w}\t{t}\t{c}\n" for i, (w, t) in enumerate(words, 1)) + "\n"
    )
    for split in ("train", "dev"):
        _write(root / "ud" / "en_ewt" / f"en_ewt-ud-{split}.conllu.gz", conllu * 4)
    for lang in ("en", "de"):
        _write(root / "ud" / "pud" / f"{lang}_pud-ud-test.conllu.gz", conllu * 2)
    context = "The river flows through the old city. The bridge was built in 1850 by the town."
    qas = [
        {"id": f"q{i}", "question": q, "answers": [{"text": a, "answer_start": context.index(a)}]}
        for i, (q, a) in enumerate(
            [("What flows?", "The river"), ("When was it built?", "1850"), ("Who built it?", "the town")] * 2
        )
    ]
    for i, qa in enumerate(qas):
        qa["id"] = f"q{i}"
    squad = json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]})
    for lang in MLQA_LANGUAGES:
        _write(root / "qa" / "mlqa" / "dev" / f"dev-context-{lang}-question-{lang}.json.gz", squad)
    for lang in XQUAD_LANGUAGES:
        _write(root / "qa" / "xquad" / f"xquad.{lang}.json.gz", squad)
    return root


@pytest.fixture(scope="session")
def tiny_pack(tmp_path_factory) -> Path:
    return write_pack(tmp_path_factory.mktemp("pack"))


# ---------------------------------------------------------------------------------------------------------
# The loop


def test_layerwise_learning_rate_decay(tiny_model):
    loaded = load_model(tiny_model)
    task = build_task("xnli")
    config = FinetuneConfig(lr=1e-3, layer_decay=0.5, weight_decay=0.01)
    model = build_task_model(task, loaded, config)
    groups = parameter_groups(model, loaded.model.config.num_layers, config)  # 2 layers
    lr_of = {}
    for g in groups:
        for p in g["params"]:
            lr_of[id(p)] = (g["lr"], g["weight_decay"])
    named = dict(model.named_parameters())
    assert lr_of[id(named["head.out.weight"])] == (1e-3, 0.01)
    assert lr_of[id(named["head.out.bias"])] == (1e-3, 0.0)  # no decay on biases
    assert lr_of[id(named["encoder.encoder.layers.1.attention.qkv.weight"])][0] == pytest.approx(5e-4)
    assert lr_of[id(named["encoder.encoder.layers.0.attention.qkv.weight"])][0] == pytest.approx(2.5e-4)
    assert lr_of[id(named["encoder.encoder.embeddings.word.weight"])][0] == pytest.approx(1.25e-4)
    assert sum(len(g["params"]) for g in groups) == len(named)


@pytest.mark.integration
def test_loop_learns_a_learnable_pair_task(tiny_model, tmp_path):
    pack = write_pack(tmp_path, xnli_premises=40)  # 120 dev pairs: the hypothesis word gives the label
    loaded = load_model(tiny_model)
    overrides = ["finetune.epochs=12", "finetune.batch_size=16", "finetune.lr=5e-3", "finetune.layer_decay=1.0"]
    result = finetune_task(loaded, "xnli", pack, "transfer", 1, overrides, progress=False)
    run = result["runs"][0]
    assert run["steps"] == 12 * math.ceil(96 / 16)
    # Chance is 33%. The bar is well above chance rather than near 100%: how fast a 2-layer model learns the cue
    # depends on how the sample tokenizer splits the three words (measured: 68% after 12 epochs).
    assert result["per_language"]["en"]["mean"] > 60.0
    assert run["select_score"] == max(h["select"] for h in run["history"])  # the best selection step was kept


@pytest.mark.integration
@pytest.mark.parametrize("name", ["xnli", "pawsx", "ner", "pos", "qa"])
def test_two_step_smoke_per_task(name, tiny_model, tiny_pack):
    loaded = load_model(tiny_model)
    overrides = [*SMALL, "finetune.epochs=1"] if name == "qa" else SMALL
    result = finetune_task(loaded, name, tiny_pack, "transfer", 1, overrides, Subsample(max_train=4), progress=False)
    run = result["runs"][0]
    if name != "qa":  # QA trains on windows, more than one per question
        assert run["steps"] == 2
    expected = {
        "xnli": list(XNLI_LANGUAGES),
        "pawsx": ["en", "de", "es", "fr", "ja", "ko", "zh"],
        "ner": ["en", "de"],
        "pos": ["en", "de"],
        "qa": list(XQUAD_LANGUAGES),
    }[name]
    assert result["languages"] == expected
    for lang in expected:
        assert 0.0 <= result["per_language"][lang]["mean"] <= 100.0
    assert result["gap"] is not None and math.isfinite(result["gap"]["mean"])
    assert "Subsampled (seeded, the same examples for every model): trained on 4 examples." in result["protocol"]
    assert "Overrides" in result["protocol"]


@pytest.mark.integration
def test_translate_train_all_uses_every_language_and_pos_refuses(tiny_model, tiny_pack):
    data = build_task("xnli").load(tiny_pack, "translate-train-all", Subsample())
    assert len(data.train) == 15 * 12  # 5 premises x 3, minus one held-out premise, in 15 languages
    assert {e.language for e in data.train} == set(XNLI_LANGUAGES) == set(data.select)
    held_out = {e.pair_id for e in data.select["en"]}
    assert held_out.isdisjoint(e.pair_id for e in data.train)  # no translation of a selection pair is trained on
    loaded = load_model(tiny_model)
    with pytest.raises(DataError, match="no translate-train-all protocol"):
        finetune_task(loaded, "pos", tiny_pack, "translate-train-all", 1, SMALL, progress=False)
    with pytest.raises(DataError, match="finetune.learning_rate: unknown key; known: lr, "):
        finetune_task(loaded, "ner", tiny_pack, "transfer", 1, ["finetune.learning_rate=1"], progress=False)


# ---------------------------------------------------------------------------------------------------------
# Hooks for other methods: a training-data transform and an alternative encoder wrapper


def swap_sides(examples):
    """A stand-in for code-switching: add every pair with its sides swapped."""
    from dataclasses import replace

    return examples + [replace(e, first=e.second, second=e.first, pair_id=e.pair_id + ":swapped") for e in examples]


class TwoViews(nn.Module):
    """A stand-in for VECO plug-in fine-tuning: the head reads two representations concatenated."""

    def __init__(self, encoder):
        super().__init__()
        self.plain = EncoderAdapter(encoder)
        self.output_size = 2 * encoder.config.hidden_size

    def forward(self, batch):
        out = self.plain.encoder(batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
        return torch.cat([out.last_hidden_state, out.hidden_states[0]], dim=-1)  # (B, T, 2C)


@pytest.mark.integration
def test_pair_task_hooks_transform_and_encoder_wrapper(tiny_model, tiny_pack):
    loaded = load_model(tiny_model)
    task = build_task("xnli", transform=swap_sides, encoder_wrapper=TwoViews)
    result = finetune_task(loaded, task, tiny_pack, "transfer", 1, SMALL, Subsample(max_train=4), progress=False)
    assert result["features"]["train"] == 2 * 4
    assert "transformed by swap_sides: 4 -> 8" in result["protocol"] and "TwoViews" in result["protocol"]
    model = build_task_model(task, loaded, FinetuneConfig())
    assert model.head.dense.in_features == 2 * loaded.model.config.hidden_size


# ---------------------------------------------------------------------------------------------------------
# CLI


@pytest.mark.integration
def test_cli_finetune_and_xtreme_write_tables(tiny_model, tiny_pack, tmp_path):
    from typer.testing import CliRunner

    from polyalign.cli import app

    common = ["--model", str(tiny_model), "--data", str(tiny_pack), "--max-train", "4", "--no-progress"]
    sets = ["--set", "finetune.epochs=1", "--set", "finetune.batch_size=4", "--set", "finetune.max_length=64"]
    runner = CliRunner()
    res = runner.invoke(app, ["finetune", "pos", "--seeds", "1", "--out", str(tmp_path / "ft"), *common, *sets])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "ft" / "finetune.md").read_text()
    assert "UD POS, transfer" in page
    assert "Produced by `polyalign" in page and "commit " in page  # results name their command and code
    res = runner.invoke(
        app,
        ["xtreme", "--tasks", "xnli,ner", "--seeds", "xnli=2,ner=1", "--out", str(tmp_path / "x"), *common, *sets,
         "--set", "xnli.task.pooling=mean"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    table = json.loads((tmp_path / "x" / "xtreme.json").read_text())
    xnli, ner = table["results"]
    assert (xnli["task"], xnli["seeds"], ner["task"], ner["seeds"]) == ("xnli", 2, "ner", 1)
    assert xnli["config"]["task_options"]["pooling"] == "mean" and "pooling" not in ner["config"]["task_options"]
    md = (tmp_path / "x" / "xtreme.md").read_text()
    assert "| task | metric | en | avg | gap |" in md and "Protocol: XNLI, transfer" in md
