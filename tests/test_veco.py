"""VECO: the two streams, CA-MLM's stop-gradient, adjacent-segment pairs, seq2seq init, the recipe."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from polyalign.checkpoint import latest_checkpoint, load_model
from polyalign.config import load_recipe
from polyalign.data.shards import ShardWriter, TokenShard
from polyalign.data.streams import AdjacentStream, ParallelBatch, StreamConfig
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.model.seq2seq import Seq2SeqTransformer
from polyalign.model.veco import plug_out, swap_halves, two_streams
from polyalign.objectives import build_objective
from polyalign.objectives.mlm import masked_lm_loss
from polyalign.train import pretrain
from tests.conftest import metrics, special_tokens, tiny_config, tiny_recipe_overrides
from tests.veco_pairs import B, T, pair_inputs, veco_model, with_new_y


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
