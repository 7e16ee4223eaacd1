"""VECO: the two streams, CA-MLM's stop-gradient, adjacent-segment pairs, plug-out, plug-in, seq2seq init."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from polyalign.checkpoint import latest_checkpoint, load_model, save_model_folder
from polyalign.config import load_recipe
from polyalign.data.shards import ShardWriter, TokenShard
from polyalign.data.streams import AdjacentStream, ParallelBatch, StreamConfig
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.model.seq2seq import Seq2SeqTransformer
from polyalign.model.veco import PlugInClassifier, plug_in_features, plug_out, swap_halves, two_streams
from polyalign.objectives import build_objective
from polyalign.objectives.mlm import masked_lm_loss
from polyalign.tokenizer import SpecialTokens
from polyalign.train import pretrain
from tests.conftest import metrics, tiny_config, tiny_recipe_overrides

B, T = 3, 9


def veco_model(seed: int = 0, **overrides) -> MaskedLanguageModel:
    torch.manual_seed(seed)
    # A wider initialisation than the default 0.02 makes the cross-attention's contribution clearly visible.
    config = tiny_config(cross_attention=True, initializer_range=0.2, **overrides)
    return MaskedLanguageModel(config).eval()


def pair_inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """A stacked pair batch: rows [0, B) are x, [B, 2B) are y; y rows are padded at different lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (2 * B, T), generator=g)
    mask = torch.ones(2 * B, T, dtype=torch.bool)
    mask[B, 6:] = False
    mask[B + 1, 4:] = False
    return {"input_ids": ids.masked_fill(~mask, 1), "attention_mask": mask}


def with_new_y(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    changed = {k: v.clone() for k, v in inputs.items()}
    changed["input_ids"][B:, 1:4] = torch.tensor([7, 8, 9])
    return changed


def test_own_stream_of_x_ignores_y_and_paired_stream_uses_it():
    model = veco_model()
    inputs = pair_inputs()
    with torch.no_grad():
        before, after = two_streams(model, inputs), two_streams(model, with_new_y(inputs))
    for h_before, h_after in zip(before.own_states, after.own_states, strict=True):
        torch.testing.assert_close(h_before[:B], h_after[:B], rtol=0, atol=0)  # H of x: every layer, bit for bit
    assert (before.paired[:B] - after.paired[:B]).abs().amax() > 1e-3  # S of x reads y
    # H of x is exactly what the encoder computes with no partner at all.
    alone = model(inputs["input_ids"][:B], attention_mask=inputs["attention_mask"][:B]).last_hidden_state
    torch.testing.assert_close(before.own[:B], alone)


def cross_attention_memories(encoder, run) -> list[torch.Tensor]:
    """The memory each layer's cross-attention sublayer received while `run()` ran, in layer order."""
    seen, hooks = [], []
    for layer in encoder.layers:
        hooks.append(
            layer.cross_attention.register_forward_pre_hook(
                lambda module, args, kwargs: seen.append(kwargs["memory"]), with_kwargs=True
            )
        )
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return seen


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_every_layer_cross_attends_to_the_partners_last_layer_detached(norm):
    """VECO §2.2: "the keys and values come from the last layer's representations of paired input", under a
    stop-gradient. The old wiring (layer l reads the partner's H^l) fails at layer 1."""
    model = veco_model(norm=norm).train()
    inputs = pair_inputs()
    out = {}
    seen = cross_attention_memories(model.encoder, lambda: out.update(streams=two_streams(model, inputs)))
    partner_last = swap_halves(out["streams"].own)
    assert len(seen) == model.config.num_layers
    for memory in seen:
        torch.testing.assert_close(memory, partner_last, rtol=0, atol=0)
        assert not memory.requires_grad  # stop-gradient: nothing flows back into the partner's own pass


class Tampered:
    """The model, except that its own-stream outputs pass through `tamper` (as if the partner's pass had
    produced other states) before two_streams reads them."""

    def __init__(self, model, tamper):
        self.model, self.config, self.tamper = model, model.config, tamper

    def __call__(self, *args, **kwargs):
        out = self.model(*args, **kwargs)
        return self.tamper(out) if kwargs.get("output_hidden_states") else out


def test_paired_stream_reads_the_partner_only_through_its_last_layer():
    """Replace the partner's H^L and nothing else: S changes; replace only H^0 .. H^(L-1): S does not."""
    from polyalign.model.encoder import EncoderOutput

    model = veco_model(num_layers=3)
    inputs = pair_inputs()

    def noise_like(h):
        return torch.randn(h.shape, generator=torch.Generator().manual_seed(7))

    def replace_lower(out):
        lower = tuple(noise_like(h) for h in out.hidden_states[:-1])
        return EncoderOutput(out.last_hidden_state, lower + out.hidden_states[-1:])

    def replace_last(out):
        last = noise_like(out.last_hidden_state)
        return EncoderOutput(last, out.hidden_states[:-1] + (last,))

    with torch.no_grad():
        paired = two_streams(model, inputs).paired
        lower_replaced = two_streams(Tampered(model, replace_lower), inputs).paired
        last_replaced = two_streams(Tampered(model, replace_last), inputs).paired
    torch.testing.assert_close(lower_replaced, paired, rtol=0, atol=0)
    assert (last_replaced - paired).abs().amax() > 1e-3


@pytest.mark.parametrize("stop_gradient", [True, False])
def test_paired_loss_sends_gradient_into_own_stream_only_without_stop_gradient(stop_gradient):
    model = veco_model().train()
    inputs = pair_inputs()
    labels = torch.full((2 * B, T), -100)
    labels[:, 2] = inputs["input_ids"][:, 2]
    streams = two_streams(model, inputs, stop_gradient=stop_gradient)
    for h in streams.own_states:
        h.retain_grad()
    paired_loss, _, _ = masked_lm_loss(model, streams.paired, labels)
    paired_loss.backward()
    own_grads = [h.grad for h in streams.own_states]
    if stop_gradient:  # VECO §2.2: H is a constant in the S terms
        assert all(g is None for g in own_grads)
    else:
        assert any(g is not None and g.abs().sum() > 0 for g in own_grads)
    # Either way the S terms train the cross-attention and the shared self-attention.
    layer = model.encoder.layers[0]
    assert layer.cross_attention.key_value.weight.grad.abs().sum() > 0
    assert layer.attention.qkv.weight.grad.abs().sum() > 0


def special_tokens() -> SpecialTokens:
    return SpecialTokens(pad=1, cls=0, sep=2, mask=3, unk=4, vocab_size=99, first_normal=5)


def test_ca_mlm_stacks_the_pair_and_sums_own_and_paired_terms():
    config = tiny_config(cross_attention=True)
    objective = build_objective("ca_mlm", {}, special_tokens(), config)
    rng = np.random.default_rng(0)
    source = [np.arange(10, 10 + n) for n in (4, 6)]
    target = [np.arange(50, 50 + n) for n in (5, 3)]
    batch = objective.make_batch(ParallelBatch(source, target, np.array([0, 0]), np.array([1, 1])), rng)
    assert batch["input_ids"].shape == (4, 8)
    restored = torch.where(batch["labels"] >= 0, batch["labels"], batch["input_ids"])
    assert restored[1, 1:7].tolist() == list(range(10, 16)) and restored[2, 1:6].tolist() == list(range(50, 55))
    model = veco_model()
    objective.setup(model)
    out = objective(model, batch)
    torch.testing.assert_close(out.loss, out.metrics["own_loss"] + out.metrics["paired_loss"])
    out.loss.backward()
    assert model.encoder.layers[1].cross_attention.query.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="cross_attention: true"):
        objective.setup(MaskedLanguageModel(tiny_config()))


def test_ca_mlm_own_term_reads_only_h_and_paired_term_reads_the_partner():
    """Eq. (1): -log P(x | x̂) comes from H (perturbing the partner y leaves it unchanged), -log P(x | ŷ, x̂) from S."""
    objective = build_objective("ca_mlm", {}, special_tokens(), tiny_config(cross_attention=True))
    model = veco_model()
    inputs = pair_inputs()
    labels = torch.full((2 * B, T), -100)
    labels[:B, 2] = inputs["input_ids"][:B, 2]  # masked tokens in x only
    batch = {**inputs, "labels": labels}
    with torch.no_grad():
        before, after = objective(model, batch), objective(model, {**with_new_y(inputs), "labels": labels})
    torch.testing.assert_close(after.metrics["own_loss"], before.metrics["own_loss"], rtol=0, atol=0)
    assert abs(after.metrics["paired_loss"] - before.metrics["paired_loss"]) > 1e-4


def test_adjacent_stream_pairs_a_segment_with_the_one_that_follows(tmp_path):
    writer = ShardWriter(tmp_path / "mono", np.uint16)
    # Line i holds tokens 100*i + 1 .. 100*i + (i % 4 + 2), so a token names its line.
    writer.add([[100 * i + k for k in range(1, i % 4 + 3)] for i in range(40)])
    writer.close()
    stream = AdjacentStream([TokenShard(tmp_path / "mono", np.uint16)], [3], StreamConfig(max_tokens=64, max_length=7))
    for _ in range(5):
        batch = stream.next_batch()
        assert set(batch.source_languages) == set(batch.target_languages) == {3}
        for x, y in zip(batch.source, batch.target, strict=True):
            assert len(x) <= 7 and len(y) <= 7
            assert y[0] // 100 == x[-1] // 100 + 1 and y[0] % 100 == 1  # y starts at the line after x ends


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


def test_seq2seq_takes_every_weight_from_the_veco_layers():
    model = veco_model()
    seq2seq = Seq2SeqTransformer.from_encoder(model).eval()
    for i, layer in enumerate(model.encoder.layers):
        encoder, decoder = seq2seq.encoder.layers[i], seq2seq.decoder.layers[i]
        assert encoder.cross_attention is None
        for name, p in layer.named_parameters():
            torch.testing.assert_close(dict(decoder.named_parameters())[name], p, rtol=0, atol=0)
            if "cross_attention" not in name:
                torch.testing.assert_close(dict(encoder.named_parameters())[name], p, rtol=0, atol=0)
    assert seq2seq.decoder.embeddings is seq2seq.encoder.embeddings
    for name, p in model.lm_head.named_parameters():
        torch.testing.assert_close(dict(seq2seq.lm_head.named_parameters())[name], p, rtol=0, atol=0)
    assert seq2seq.decoder.layers[0].attention.qkv.weight is not seq2seq.encoder.layers[0].attention.qkv.weight

    # Functionally: the encoder is the plugged-out model, and the decoder without its causal mask is VECO's
    # paired stream of y reading x (Eqs. 6-9).
    inputs = pair_inputs()
    x = {k: v[:B] for k, v in inputs.items()}
    y = {k: v[B:] for k, v in inputs.items()}
    with torch.no_grad():
        torch.testing.assert_close(seq2seq.encode(x), plug_out(model)(**x).last_hidden_state)
        streams = two_streams(model, inputs)
        unmasked = seq2seq.decoder(**y, memory=seq2seq.encode(x), memory_mask=x["attention_mask"])
    torch.testing.assert_close(unmasked.last_hidden_state, streams.paired[B:])

    # An encoder without cross-attention (XLM) fills everything but the encoder-decoder attention.
    xlm = plug_out(model)
    from_xlm = Seq2SeqTransformer.from_encoder(xlm)
    torch.testing.assert_close(
        from_xlm.decoder.layers[1].attention.qkv.weight, xlm.encoder.layers[1].attention.qkv.weight
    )
    assert from_xlm.decoder.layers[1].cross_attention is not None


def test_seq2seq_every_decoder_layer_attends_to_the_final_encoder_output():
    """A standard encoder-decoder (VECO §3.2): every decoder layer's encoder-decoder attention reads the encoder's
    final output, with VECO's cross-attention weights; not layer l reading encoder layer l."""
    model = veco_model(num_layers=3)
    seq2seq = Seq2SeqTransformer.from_encoder(model).eval()
    inputs = pair_inputs()
    source = {k: v[:B] for k, v in inputs.items()}
    target = {k: v[B:] for k, v in inputs.items()}
    with torch.no_grad():
        seen = cross_attention_memories(seq2seq.decoder, lambda: seq2seq(source, target))
        final = plug_out(model)(**source).last_hidden_state
    assert len(seen) == 3
    for memory in seen:
        torch.testing.assert_close(memory, final)
    for veco_layer, decoder_layer in zip(model.encoder.layers, seq2seq.decoder.layers, strict=True):
        for name, p in veco_layer.cross_attention.named_parameters():
            torch.testing.assert_close(dict(decoder_layer.cross_attention.named_parameters())[name], p, rtol=0, atol=0)


def test_seq2seq_decoder_is_causal_and_decodes_greedily():
    seq2seq = Seq2SeqTransformer.from_encoder(veco_model())
    inputs = pair_inputs()
    source = {k: v[:B] for k, v in inputs.items()}
    target = {"input_ids": inputs["input_ids"][B:].clone(), "attention_mask": torch.ones(B, T, dtype=torch.bool)}
    with torch.no_grad():
        before = seq2seq(source, target)
        target["input_ids"][:, 5:] = 42
        after = seq2seq(source, target)
    torch.testing.assert_close(before[:, :5], after[:, :5])
    assert (before[:, 5:] - after[:, 5:]).abs().amax() > 1e-3
    hypotheses = seq2seq.greedy(source, bos=0, eos=2, max_length=6)
    assert len(hypotheses) == B and all(len(h) <= 6 and 2 not in h for h in hypotheses)


def test_veco_recipe_has_the_paper_defaults():
    recipe = load_recipe("veco")
    masking = {spec.name: spec.config.get("mask_prob") for spec in recipe.objectives}
    assert masking == {"ca_mlm_adjacent": 0.15, "ca_mlm": 0.25, "tlm": 0.25}  # Table 8: 15% mono / 25% bilingual
    model_config = tiny_config(cross_attention=True)
    objectives = {s.name: build_objective(s.name, s.config, special_tokens(), model_config) for s in recipe.objectives}
    assert {name: o.config.mask_prob for name, o in objectives.items()} == masking  # reaches the objectives
    t = recipe.trainer
    assert t.train_only == ["cross_attention"] and 0 < t.train_only_until < t.max_steps  # §4: first stage


@pytest.mark.integration
def test_veco_recipe_trains_and_train_only_holds_all_but_cross_attention(sample_prepared, tmp_path):
    overrides = tiny_recipe_overrides(sample_prepared, steps=2)
    with pytest.raises(DataError, match=r"train_only.*pass --init-from"):  # the recipe's first stage needs a start
        pretrain(load_recipe("veco", overrides), tmp_path / "veco", progress=False)
    pretrain(load_recipe("veco", overrides + ["trainer.train_only=[]"]), tmp_path / "veco", progress=False)
    records = metrics(tmp_path / "veco")
    assert "ca_mlm_adjacent/loss" in records[0] and "ca_mlm/loss" not in records[0]  # step 1: monolingual pairs
    assert "ca_mlm/loss" in records[1] and "tlm/loss" in records[1]  # step 2: translation pairs + TLM
    assert all(np.isfinite(r["loss"]) for r in records)

    start = latest_checkpoint(tmp_path / "veco")
    held = ["trainer.train_only=[cross_attention]", "trainer.train_only_until=10", f"init_from={start}"]
    pretrain(load_recipe("veco", overrides + held), tmp_path / "cross-only", progress=False)
    held_model = load_model(tmp_path / "cross-only").model
    before, after = load_model(start).model.state_dict(), held_model.state_dict()
    # The held parameters have no optimizer moments in the checkpoint: the trainer dropped their gradients.
    moments = load_file(latest_checkpoint(tmp_path / "cross-only") / "trainer_state.safetensors")
    with_moments = {k.split(".")[1] for k in moments if k.endswith(".exp_avg")}
    assert len(with_moments) == sum("cross_attention" in n for n, _ in held_model.named_parameters())
    for name, value in before.items():
        if "cross_attention" in name and name.endswith("weight") and "norm" not in name:
            assert not torch.equal(value, after[name]), name
        elif "cross_attention" not in name:
            torch.testing.assert_close(value, after[name], rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------------
# Plug-in fine-tuning as a task: `polyalign finetune xnli|pawsx --plug-in` (VECO §3.1)


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
