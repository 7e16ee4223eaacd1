"""Hugging Face interop: parity with transformers in both directions, tokenizer round trip, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from polyalign.checkpoint import LoadedModel, load_model
from polyalign.hf_folders import export_hf, write_hf_tokenizer
from polyalign.io import DataError
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.model.hf import hf_sizes
from polyalign.tokenizer import SentencePieceTokenizer
from tests.conftest import SAMPLE, tiny_config

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5
SENTENCES = [
    "The cat sat on the mat.",
    "Der Hund schläft im Garten, weil es heute sehr warm ist.",
    "今天天气很好",
    "Кошка спит.",
]


def tiny_hf(vocab_size: int) -> dict:
    """conftest's tiny encoder in transformers' terms, without dropout (as tiny_config)."""
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return hf_sizes(tiny_config(vocab_size=vocab_size)) | no_dropout


def randomise_(module: torch.nn.Module, seed: int = 0) -> None:
    """Random values in every parameter, so that a wrongly mapped bias or LayerNorm gain shows up (fresh models
    have zero biases and unit gains)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            centre = 1.0 if "norm" in name.lower() and name.endswith("weight") else 0.0
            p.copy_(centre + 0.1 * torch.randn(p.shape, generator=g))


def padded_batch(tokenizer, sentences=SENTENCES) -> tuple[torch.Tensor, torch.Tensor]:
    """`<s> x </s>` per sentence, right-padded: a batch with padding, as every evaluation makes."""
    sp = tokenizer.special
    seqs = [[sp.cls, *ids, sp.sep] for ids in tokenizer.encode_batch(sentences)]
    T = max(map(len, seqs))
    ids = torch.full((len(seqs), T), sp.pad)
    mask = torch.zeros(len(seqs), T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : len(s)], mask[b, : len(s)] = torch.tensor(s), True
    assert not mask.all()  # the batch really has padding
    return ids, mask


def max_diff_at_tokens(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    """Largest absolute difference over real tokens (padding outputs are unused and differ by design: XLM-R
    gives padding the padding position)."""
    return float((a[mask] - b[mask]).abs().max())


@pytest.fixture(scope="module")
def sp_tokenizer(sample_prepared) -> SentencePieceTokenizer:
    return SentencePieceTokenizer(sample_prepared / "tokenizer" / "sentencepiece.model")


@pytest.fixture(scope="module")
def hf_xlmr(tmp_path_factory, sp_tokenizer) -> Path:
    """A randomly initialised tiny XLM-RoBERTa saved by transformers, with our tokenizer in HF form."""
    folder = tmp_path_factory.mktemp("hf") / "xlmr"
    config = transformers.XLMRobertaConfig(
        max_position_embeddings=66, type_vocab_size=1, **tiny_hf(sp_tokenizer.special.vocab_size)
    )
    model = transformers.XLMRobertaForMaskedLM(config)
    randomise_(model)
    model.save_pretrained(folder)
    write_hf_tokenizer(sp_tokenizer, folder, 64)
    return folder


def transformers_outputs(folder: Path, ids, mask, **kwargs):
    model = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, **kwargs)
    return out.hidden_states, out.logits


def polyalign_outputs(model: MaskedLanguageModel, ids, mask, **kwargs):
    with torch.no_grad():
        out = model.eval()(ids, attention_mask=mask, output_hidden_states=True, **kwargs)
        return out.hidden_states, model.mlm_logits(out.last_hidden_state)


def assert_same_outputs(ours, theirs, mask) -> None:
    (our_states, our_logits), (their_states, their_logits) = ours, theirs
    assert len(our_states) == len(their_states)
    for layer, (a, b) in enumerate(zip(our_states, their_states, strict=True)):
        assert max_diff_at_tokens(a, b, mask) < TOLERANCE, f"layer {layer}"
    assert max_diff_at_tokens(our_logits, their_logits, mask) < 10 * TOLERANCE  # logits are ~10x larger


# ---------------------------------------------------------------------------------------------------------


def test_xlmr_import_gives_the_hidden_states_of_transformers(hf_xlmr):
    loaded = load_model(hf_xlmr)
    assert loaded.model.config.position_offset == 2 and loaded.model.config.max_positions == 64
    ids, mask = padded_batch(loaded.tokenizer)
    assert_same_outputs(polyalign_outputs(loaded.model, ids, mask), transformers_outputs(hf_xlmr, ids, mask), mask)


def test_export_loads_in_transformers_with_the_same_outputs_and_tokenizer(sp_tokenizer, tmp_path):
    torch.manual_seed(0)
    model = MaskedLanguageModel(tiny_config(vocab_size=sp_tokenizer.special.vocab_size))
    randomise_(model)
    ours = LoadedModel(model.eval(), sp_tokenizer, [], tmp_path / "ours")
    export_hf(ours, tmp_path / "hf")

    ids, mask = padded_batch(sp_tokenizer)
    expected = polyalign_outputs(model, ids, mask)
    assert_same_outputs(expected, transformers_outputs(tmp_path / "hf", ids, mask), mask)
    base, info = transformers.AutoModel.from_pretrained(tmp_path / "hf", output_loading_info=True)
    V = sp_tokenizer.special.vocab_size  # not a multiple of 64: the model pads its table, the export does not
    assert V % 64 and model.encoder.embeddings.word.num_embeddings > V
    assert base.config.vocab_size == base.embeddings.word_embeddings.num_embeddings == V
    assert all(k.startswith("pooler.") for k in info["missing_keys"])  # we have no pooler; all else loads
    assert all(k.startswith("lm_head.") for k in info["unexpected_keys"])
    with torch.no_grad():
        hidden = base.eval()(input_ids=ids, attention_mask=mask).last_hidden_state
    assert max_diff_at_tokens(hidden, expected[0][-1], mask) < TOLERANCE
    # ... and it imports back into polyalign unchanged
    assert_same_outputs(polyalign_outputs(load_model(tmp_path / "hf").model, ids, mask), expected, mask)


def test_exported_tokenizer_gives_our_ids(sp_tokenizer, tmp_path):
    write_hf_tokenizer(sp_tokenizer, tmp_path, 64)
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path)
    texts = [t for f in sorted((SAMPLE / "mono").glob("*.txt")) for t in f.read_text().splitlines()]
    texts += ["  extra   spaces  ", "ｆｕｌｌｗｉｄｔｈ ①", "emoji 🤗 and a rare 𠀋", "tab\tand\u00a0no-break", ""]
    assert hf(texts, add_special_tokens=False)["input_ids"] == sp_tokenizer.encode_batch(texts)
    assert hf("Hallo Welt")["input_ids"] == [0, *sp_tokenizer.encode_batch(["Hallo Welt"])[0], 2]
    assert (hf.pad_token_id, hf.mask_token_id, hf.unk_token_id, len(hf)) == (1, 4, 3, sp_tokenizer.special.vocab_size)


def test_bert_import_and_export_match_transformers(tmp_path):
    folder = tmp_path / "bert"
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "sat", "on", "mat", "a", "big", "red"]
    vocab = {w: i for i, w in enumerate(words + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"])}
    tokenizer = transformers.BertTokenizer(vocab=vocab)
    config = transformers.BertConfig(max_position_embeddings=40, **tiny_hf(len(vocab)))
    model = transformers.BertForMaskedLM(config)
    randomise_(model)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    loaded = load_model(folder)
    c = loaded.model.config
    assert (c.position_offset, c.type_vocab_size, c.pad_token_id, c.layer_norm_eps) == (0, 2, 0, 1e-12)
    sentences = ["the cat sat on the mat", "a big red dog", "the red cat"]
    ids, mask = padded_batch(loaded.tokenizer, sentences)
    types = (torch.arange(ids.shape[1]) >= 3).long().expand_as(ids)  # a second segment: token types matter
    ours = polyalign_outputs(loaded.model, ids, mask, token_type_ids=types)
    assert_same_outputs(ours, transformers_outputs(folder, ids, mask, token_type_ids=types), mask)

    export_hf(loaded, tmp_path / "as-xlmr")
    exported = transformers_outputs(tmp_path / "as-xlmr", ids, mask, token_type_ids=types)
    assert_same_outputs(ours, exported, mask)
    assert json.loads((tmp_path / "as-xlmr" / "config.json").read_text())["model_type"] == "xlm-roberta"


def test_electra_discriminator_imports_with_factorised_embeddings(tmp_path, capsys):
    folder = tmp_path / "electra"
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on"])}
    config = transformers.ElectraConfig(embedding_size=16, max_position_embeddings=40, **tiny_hf(len(vocab)))
    model = transformers.ElectraForPreTraining(config)
    randomise_(model)
    model.save_pretrained(folder)
    transformers.BertTokenizer(vocab=vocab).save_pretrained(folder)

    loaded = load_model(folder)
    assert "no MLM head" in capsys.readouterr().err
    assert loaded.model.config.embedding_size == 16 and loaded.model.encoder.embeddings.project is not None
    ids, mask = padded_batch(loaded.tokenizer, ["the cat sat on the mat", "the cat"])
    with torch.no_grad():
        theirs = transformers.AutoModel.from_pretrained(folder).eval()(
            input_ids=ids, attention_mask=mask, output_hidden_states=True
        )
    ours = polyalign_outputs(loaded.model, ids, mask)[0]
    for a, b in zip(ours, theirs.hidden_states, strict=True):
        assert max_diff_at_tokens(a, b, mask) < TOLERANCE
    with pytest.raises(DataError, match="factorised embeddings"):
        export_hf(loaded, tmp_path / "out")


def test_pickled_weights_load_only_when_trusted(hf_xlmr, tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    from safetensors.torch import load_file

    torch.save(load_file(str(hf_xlmr / "model.safetensors")), folder / "pytorch_model.bin")
    for f in hf_xlmr.iterdir():
        if f.name != "model.safetensors":
            (folder / f.name).write_bytes(f.read_bytes())
    with pytest.raises(DataError, match=r"pytorch_model\.bin: PyTorch pickle weights.*--trust-pickle"):
        load_model(folder)
    trusted = load_model(folder, trust_pickle=True)
    reference = load_model(hf_xlmr)
    assert all(torch.equal(a, b) for a, b in zip(trusted.model.parameters(), reference.model.parameters(), strict=True))
    # weights_only=True: a pickle that holds more than tensors is refused even when trusted
    torch.save({"w": torch.zeros(1), "payload": Path("x")}, folder / "pytorch_model.bin")
    with pytest.raises(DataError, match="cannot read weights"):
        load_model(folder, trust_pickle=True)


def test_unsupported_configs_are_refused_clearly(hf_xlmr, tmp_path, sp_tokenizer):
    folder = tmp_path / "gelu-new"
    folder.mkdir()
    for f in hf_xlmr.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": "gelu_new"}))
    with pytest.raises(DataError, match="hidden_act='gelu_new' is not supported"):
        load_model(folder)
    for overrides, message in [
        (dict(position_bias="relative"), "position bias"),
        (dict(absolute_positions=False, position_bias="relative"), "no absolute position embeddings"),
        (dict(norm="pre"), "pre-LN"),
        (dict(cross_attention=True), "--drop-cross-attention"),
        (dict(num_languages=3), "--languages-as-token-types"),
    ]:
        model = MaskedLanguageModel(tiny_config(vocab_size=sp_tokenizer.special.vocab_size, **overrides))
        with pytest.raises(DataError, match=message):
            export_hf(LoadedModel(model, sp_tokenizer, [], tmp_path), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    with pytest.raises(DataError, match="already exists"):
        export_hf(load_model(hf_xlmr), hf_xlmr.parent)


def test_veco_plug_out_and_language_folding_export_exactly(sp_tokenizer, tmp_path):
    V = sp_tokenizer.special.vocab_size
    ids, mask = padded_batch(sp_tokenizer)
    # VECO plug-out: with cross-attention dropped, the export computes the encoder run without memory.
    veco = MaskedLanguageModel(tiny_config(vocab_size=V, cross_attention=True))
    randomise_(veco)
    veco_loaded = LoadedModel(veco.eval(), sp_tokenizer, [], tmp_path)
    notes = export_hf(veco_loaded, tmp_path / "veco", drop_cross_attention=True)
    assert "cross-attention dropped" in notes[0]
    assert_same_outputs(polyalign_outputs(veco, ids, mask), transformers_outputs(tmp_path / "veco", ids, mask), mask)
    # XLM language embeddings become token types: token_type_ids = language index gives our language_ids.
    xlm = MaskedLanguageModel(tiny_config(vocab_size=V, num_languages=3))
    randomise_(xlm)
    langs = torch.tensor([0, 2, 1, 2])[:, None].expand_as(ids)
    export_hf(LoadedModel(xlm.eval(), sp_tokenizer, ["de", "en", "fr"], tmp_path), tmp_path / "xlm", False, True)
    assert_same_outputs(
        polyalign_outputs(xlm, ids, mask, language_ids=langs),
        transformers_outputs(tmp_path / "xlm", ids, mask, token_type_ids=langs),
        mask,
    )
    readme = (tmp_path / "xlm" / "README.md").read_text()  # the index a transformers user must pass, per language
    assert all(f"| {lang} | {i} |" in readme for i, lang in enumerate(["de", "en", "fr"]))


@pytest.mark.integration
def test_a_recipe_continues_from_a_hugging_face_folder(hf_xlmr, sample_prepared, tmp_path, capsys):
    from polyalign.config import load_recipe
    from polyalign.train import pretrain

    overrides = [
        f"data.prepared={sample_prepared}",
        f"init_from={hf_xlmr}",
        "data.mono.max_tokens=512",
        "data.mono.max_length=30",
        "trainer.max_steps=2",
        "trainer.warmup_steps=1",
        "trainer.lr=0.0",  # so the run's weights must still be exactly the imported ones
    ]
    pretrain(load_recipe("mlm", overrides), tmp_path / "run", progress=False)
    assert "recipe values not applied" in capsys.readouterr().out  # the recipe's hidden_size 384 and so on
    after, before = load_model(tmp_path / "run").model.state_dict(), load_model(hf_xlmr).model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in after)


def test_cli_evaluates_tatoeba_on_a_hugging_face_folder_and_exports(hf_xlmr, tmp_path):
    from typer.testing import CliRunner

    from polyalign.cli import app

    runner = CliRunner()
    args = ["evaluate", "tatoeba", "--model", str(hf_xlmr), "--data", str(SAMPLE / "tatoeba"), "--langs", "deu,fra"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "eval")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "eval" / "tatoeba.json").read_text())
    assert set(report["reported"]["per_language"]) == {"deu", "fra"}
    result = runner.invoke(app, ["export", "--model", str(hf_xlmr), "--out", str(tmp_path / "re-export")])
    assert result.exit_code == 0, result.output
    assert EncoderConfig.from_dict(load_model(tmp_path / "re-export").model.config.to_dict()).position_offset == 2


def test_hf_conversion_does_not_import_the_checkpoint_module():
    """checkpoint.py owns the folder format and loads a Hugging Face folder through hf_folders.py, which calls
    into model/hf.py to convert; never the other way round."""
    import ast

    import polyalign.model.hf as hf

    tree = ast.parse(Path(hf.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "polyalign.checkpoint" not in imported
