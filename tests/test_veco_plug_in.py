"""VECO's plug-out and plug-in (VECO §3.1): the encoder without cross-attention, own and paired features, and
plug-in fine-tuning as a task (`polyalign finetune xnli|pawsx --plug-in`)."""

from __future__ import annotations

import json

import pytest
import torch

from polyalign.checkpoint import load_model, save_model_folder
from polyalign.model import MaskedLanguageModel
from polyalign.model.veco import PlugInClassifier, plug_in_features, plug_out
from tests.conftest import tiny_config
from tests.veco_pairs import B, pair_inputs, veco_model


def test_plug_out_is_the_encoder_without_cross_attention(tmp_path, sample_prepared):
    from typer.testing import CliRunner

    from polyalign.cli import app
    from polyalign.data.prepared import PreparedData

    model = veco_model(vocab_size=2000)
    inputs = pair_inputs()
    plain = plug_out(model)
    assert not plain.config.cross_attention
    assert not any("cross_attention" in name for name in plain.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(plain(**inputs).last_hidden_state, model(**inputs).last_hidden_state)

    tokenizer = PreparedData(sample_prepared).tokenizer()
    save_model_folder(tmp_path / "veco", model, tokenizer, ["de", "en"])
    result = CliRunner().invoke(app, ["plug-out", "--model", str(tmp_path / "veco"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    loaded = load_model(tmp_path / "out")
    assert not loaded.model.config.cross_attention and loaded.languages == ["de", "en"]
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(**inputs).last_hidden_state, model(**inputs).last_hidden_state)


def test_plug_in_features_concatenate_own_and_paired_representations():
    model = veco_model()
    g = torch.Generator().manual_seed(1)
    x = {"input_ids": torch.randint(5, 99, (2, 5), generator=g), "attention_mask": torch.ones(2, 5, dtype=torch.bool)}
    y = {"input_ids": torch.randint(5, 99, (2, 8), generator=g), "attention_mask": torch.ones(2, 8, dtype=torch.bool)}
    y["attention_mask"][1, 6:] = False
    with torch.no_grad():
        features_x, features_y = plug_in_features(model, x, y)
        own_x = model(**x).last_hidden_state
        own_y = model(**y, output_hidden_states=True).hidden_states[1:]
        paired_x = model(**x, memory=own_y[-1], memory_mask=y["attention_mask"]).last_hidden_state
    C = model.config.hidden_size
    assert features_x.shape == (2, 5, 2 * C) and features_y.shape == (2, 8, 2 * C)
    torch.testing.assert_close(features_x[..., :C], own_x)  # [H^L_x : S^L_x], computed unpadded
    torch.testing.assert_close(features_x[..., C:], paired_x)

    classifier = PlugInClassifier(model.train(), num_labels=3)
    logits_x, logits_y = classifier(x, y)
    assert logits_x.shape == logits_y.shape == (2, 3)
    torch.nn.functional.cross_entropy(logits_x, torch.tensor([0, 2])).backward()
    assert model.encoder.layers[0].cross_attention.key_value.weight.grad.abs().sum() > 0


def test_plug_in_inference_reads_each_input_with_its_own_partner_as_training_does():
    """In eval mode the plug-in encoder skips the partners' paired stream (only the inputs are scored): the inputs'
    [H^L : S^L] must be exactly the training path's, S^L reading the partner's last layer."""
    from polyalign.model.veco import PlugInEncoder

    encoder = PlugInEncoder(veco_model().encoder)
    batch = pair_inputs()
    with torch.no_grad():
        both = encoder.train()(batch)  # dropout is 0 in tiny_config: train and eval differ only in the path taken
        inputs_only = encoder.eval()(batch)
    C = encoder.encoder.config.hidden_size
    torch.testing.assert_close(inputs_only[:B], both[:B])
    assert inputs_only[B:, :, C:].abs().sum() == 0 and not torch.equal(both[:B, :, C:], both[:B, :, :C])


def save_tiny(folder, sample_prepared, cross_attention: bool):
    from polyalign.tokenizer import load_tokenizer

    tok = load_tokenizer(sample_prepared / "tokenizer")
    config = tiny_config(
        vocab_size=tok.special.vocab_size,
        pad_token_id=tok.special.pad,
        num_languages=3,
        max_positions=128,
        cross_attention=cross_attention,
        initializer_range=0.2,
    )
    torch.manual_seed(0)
    save_model_folder(folder, MaskedLanguageModel(config), tok, ["en", "de", "zh"])
    return folder


def plug_in_task(name: str):
    from polyalign.finetune import build_task
    from polyalign.finetune.pairs import PairOptions

    return build_task(name, options=PairOptions(plug_in=True))


def test_plug_in_pairs_every_input_with_its_translation(tmp_path):
    from polyalign.finetune import Subsample
    from polyalign.io import DataError
    from tests.test_finetune_loop import write_pack

    pack = write_pack(tmp_path)
    data = plug_in_task("xnli").load(pack, "translate-train-all", Subsample())
    # Training: every translated pair with its English original (VECO §5, footnote 6), 14 languages x 12 rows.
    assert len(data.train) == 14 * 12
    assert all(e.language != "en" and (e.partner.language, e.partner.pair_id) == ("en", e.pair_id) for e in data.train)
    for lang, examples in [*data.select.items(), *data.test.items()]:
        for e in examples:
            assert (e.partner.language, e.partner.pair_id) == ("ar" if lang == "en" else "en", e.pair_id)
    paws = plug_in_task("pawsx").load(pack, "translate-train-all", Subsample())
    partner_language = {lang: {e.partner.language for e in examples} for lang, examples in paws.test.items()}
    expected = {"en": {"es"}, "de": {"zh"}, "zh": {"de"}} | {k: {"en"} for k in ("es", "fr", "ja", "ko")}
    assert partner_language == expected  # PAWS-X: en is scored on dev rows, de and zh on their test sets
    assert all(e.partner.pair_id == e.pair_id for examples in paws.test.values() for e in examples)
    with pytest.raises(DataError, match="needs --setting translate-train-all"):
        plug_in_task("xnli").load(pack, "transfer", Subsample())


def test_plug_in_task_model_classifies_from_own_and_paired_streams(tmp_path, sample_prepared):
    """Each row's features are [H^L_x : S^L_x] with S reading its translation's last layer, as computed for the
    pair alone; the loss covers both sides, the outputs only the inputs."""
    from polyalign.finetune import Subsample, build_task
    from polyalign.finetune.base import Feature
    from polyalign.finetune.loop import FinetuneConfig, build_task_model
    from tests.test_finetune_loop import write_pack

    loaded = load_model(save_tiny(tmp_path / "veco", sample_prepared, cross_attention=True))
    task = plug_in_task("xnli")
    data = task.load(write_pack(tmp_path / "pack"), "translate-train-all", Subsample(max_train=3))
    features = task.features(data.train, loaded, 64, True)
    special = loaded.tokenizer.special
    batch = task.collate(features, special)
    assert batch["input_ids"].shape[0] == 6
    assert batch["labels"].tolist() == [e.label for e in data.train] + [e.partner.label for e in data.train]
    model = build_task_model(task, loaded, FinetuneConfig()).eval()
    with torch.no_grad():
        hidden = model.encoder(batch)  # (6, T, 2C)
        plain = build_task("xnli")  # the same rows, one pair at a time and unstacked
        for i, f in enumerate(features):
            x = plain.collate([f], special)
            y = plain.collate([Feature([], extra=f.extra["partner"])], special)
            x_in = {k: x[k] for k in ("input_ids", "attention_mask", "position_ids", "language_ids")}
            y_in = {k: y[k] for k in ("input_ids", "attention_mask", "position_ids", "language_ids")}
            own = loaded.model(**x_in).last_hidden_state
            partner_last = loaded.model(**y_in).last_hidden_state
            paired = loaded.model(**x_in, memory=partner_last, memory_mask=y["attention_mask"]).last_hidden_state
            Tx = x["input_ids"].shape[1]
            torch.testing.assert_close(hidden[i, :Tx], torch.cat([own, paired], -1)[0], rtol=1e-4, atol=1e-5)
        logits = model(batch)
    assert logits.shape == (6, 3) and len(task.outputs(logits, batch)) == 3


def test_plug_in_inference_batches_count_both_stacked_rows(tmp_path, sample_prepared):
    """Scoring batches are sorted and sized by what a stacked pair costs (two rows padded to the longer one), so a
    batch of short inputs is not padded to its longest translation nor twice the token budget."""
    from polyalign.finetune import Subsample
    from polyalign.finetune.loop import FinetuneConfig, build_task_model, predict
    from tests.test_finetune_loop import write_pack

    loaded = load_model(save_tiny(tmp_path / "veco", sample_prepared, cross_attention=True))
    task = plug_in_task("xnli")
    examples = task.load(write_pack(tmp_path / "pack"), "translate-train-all", Subsample()).test["de"]
    features = task.features(examples, loaded, 64, False)
    partners = task._features([e.partner for e in examples], loaded, 64)
    assert [f.partner_length for f in features] == [p.length for p in partners]
    assert [f.padded_length for f in features] == [2 * max(f.length, f.partner_length) for f in features]
    config = FinetuneConfig(eval_batch_tokens=2 * max(f.padded_length for f in features))
    seen, collate = [], task.collate

    def counting_collate(rows, special):
        batch = collate(rows, special)
        seen.append(batch["input_ids"].numel())
        return batch

    task.collate = counting_collate
    predict(build_task_model(task, loaded, FinetuneConfig()), task, features, config, loaded.tokenizer.special)
    assert len(seen) > 1 and max(seen) <= config.eval_batch_tokens  # the padded stacked batch fits the budget


@pytest.mark.integration
def test_cli_finetune_plug_in_end_to_end_and_refuses_a_model_without_cross_attention(tmp_path, sample_prepared, capsys):
    from typer.testing import CliRunner

    from polyalign.cli import app, main
    from tests.test_finetune_loop import write_pack

    veco = save_tiny(tmp_path / "veco", sample_prepared, cross_attention=True)
    pack = write_pack(tmp_path / "pack")
    common = ["--data", str(pack), "--seeds", "1", "--max-train", "4", "--max-select", "2", "--max-eval", "2"]
    common += ["--set", "finetune.epochs=1", "--set", "finetune.batch_size=2", "--set", "finetune.max_length=64"]
    common += ["--no-progress"]
    args = ["finetune", "xnli", "--plug-in", "--setting", "translate-train-all", *common]
    result = CliRunner().invoke(app, [*args, "--model", str(veco), "--out", str(tmp_path / "ft")])
    assert result.exit_code == 0, result.output
    table = json.loads((tmp_path / "ft" / "finetune.json").read_text())["results"][0]
    assert table["config"]["task_options"]["plug_in"] is True and table["runs"][0]["steps"] == 2
    assert "Plug-in fine-tuning (VECO §3.1)" in table["protocol"]
    assert all(0 <= table["per_language"][lang]["mean"] <= 100 for lang in table["languages"])

    plain = save_tiny(tmp_path / "plain", sample_prepared, cross_attention=False)
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--model", str(plain)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "has no cross-attention" in errors[0] and "Traceback" not in err
