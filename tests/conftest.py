"""Shared fixtures: the bundled sample corpus prepared once per session, and tiny model configs; the hooks that
fail a test which trains or starts Python without the `integration` mark (integration_mark.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from polyalign.model import EncoderConfig
from polyalign.tokenizer import SpecialTokens
from tests.integration_mark import (  # noqa: F401  (hooks: pytest finds them here)
    pytest_fixture_setup,
    pytest_runtest_call,
    pytest_runtest_setup,
)

SAMPLE = Path(__file__).resolve().parents[1] / "polyalign" / "sample_data"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

torch.set_num_threads(2)


def tiny_config(**overrides) -> EncoderConfig:
    """The tiny encoder every unit test uses (hidden 32, 2 layers), as in transformers' testers."""
    base = dict(
        vocab_size=99,
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        ffn_size=37,
        max_positions=64,
        dropout=0.0,
        attention_dropout=0.0,
    )
    return EncoderConfig(**{**base, **overrides})


def special_tokens() -> SpecialTokens:
    """The special tokens of tiny_config's 99-piece vocabulary, for objectives built without a tokenizer."""
    return SpecialTokens(pad=1, cls=0, sep=2, mask=3, unk=4, vocab_size=99, first_normal=5)


@pytest.fixture(scope="session")
def sample_prepared(tmp_path_factory) -> Path:
    """The bundled sample corpus, tokenized with a small SentencePiece vocabulary."""
    from polyalign.data.prepare import PrepareConfig, discover_corpus, prepare

    out = tmp_path_factory.mktemp("prepared") / "sample"
    corpus = discover_corpus(SAMPLE / "mono", SAMPLE / "parallel")
    prepare(corpus, PrepareConfig(out=out, vocab_size=2000, exclude=[SAMPLE / "tatoeba"], workers=1))
    return out


def tiny_recipe_overrides(prepared: Path, steps: int = 4) -> list[str]:
    return [
        f"data.prepared={prepared}",
        "model.hidden_size=32",
        "model.num_layers=2",
        "model.num_heads=4",
        "model.ffn_size=64",
        "model.max_positions=128",
        "data.mono.max_tokens=512",
        "data.mono.max_length=30",
        "data.parallel.max_tokens=512",
        "data.parallel.max_length=30",
        f"trainer.max_steps={steps}",
        "trainer.warmup_steps=1",
        "trainer.log_every=1",
        "trainer.lr=1e-3",
    ]


def exact_recipe_overrides(prepared: Path, steps: int) -> list[str]:
    """tiny_recipe_overrides without dropout and in fp32, for runs that must compute the same losses in another
    layout (processes x accumulation): only the float reduction order may differ."""
    return tiny_recipe_overrides(prepared, steps) + [
        "model.dropout=0.0",
        "model.attention_dropout=0.0",
        "trainer.precision=fp32",
    ]


def metrics(run: Path) -> list[dict]:
    """A run's metrics.jsonl: one record per logged step."""
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def losses(run: Path) -> list[tuple[int, float]]:
    """(step, loss) of every logged step: two runs trained the same when these are equal."""
    return [(r["step"], r["loss"]) for r in metrics(run)]


def shared_data(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


@pytest.fixture(scope="module")
def tiny_model(sample_prepared, tmp_path_factory):
    """A random tiny model (2 layers, language embeddings) with the sample corpus' tokenizer, saved as a folder."""
    from polyalign.checkpoint import save_model_folder
    from polyalign.data.prepared import PreparedData
    from polyalign.model import MaskedLanguageModel

    prepared = PreparedData(sample_prepared)
    tok = prepared.tokenizer()
    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=tok.special.vocab_size,
        pad_token_id=tok.special.pad,
        num_languages=len(prepared.languages),
        max_positions=128,
    )
    return save_model_folder(
        tmp_path_factory.mktemp("align") / "model", MaskedLanguageModel(config), tok, prepared.languages
    )
