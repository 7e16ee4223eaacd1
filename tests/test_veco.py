"""VECO: the two streams, CA-MLM's stop-gradient, adjacent-segment pairs, plug-out, plug-in, seq2seq init."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from polyalign.checkpoint import latest_checkpoint, load_model, save_model_folder
from polyalign.config import load_recipe
from polyalign.data.shards import ShardWriter, TokenShard
from polyalign.data.streams import AdjacentStream, ParallelBatch, StreamConfig
from polyalign.model import MaskedLanguageModel
from polyalign.model.seq2seq import Seq2SeqTransformer
from polyalign.model.veco import PlugInClassifier, plug_in_features, plug_out, swap_halves, two_streams
from polyalign.objectives import build_objective
from polyalign.objectives.mlm import masked_lm_loss
from polyalign.tokenizer import SpecialTokens
from polyalign.train import pretrain
from tests.conftest import tiny_config, tiny_recipe_overrides

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


def test_paired_stream_layer_l_attends_to_the_partners_layer_l():
    model = veco_model()
    inputs = pair_inputs()
    with torch.no_grad():
        streams = two_streams(model, inputs)
        partner = [swap_halves(h) for h in streams.own_states[1:]]  # VECO Eqs. 7-8: K, V = H^l of the partner
        direct = model(**inputs, memory=partner, memory_mask=swap_halves(inputs["attention_mask"]))
        shifted = [swap_halves(h) for h in streams.own_states[:-1]]  # H^(l-1) would be a different model
        wrong = model(**inputs, memory=shifted, memory_mask=swap_halves(inputs["attention_mask"]))
    torch.testing.assert_close(streams.paired, direct.last_hidden_state)
    assert (streams.paired - wrong.last_hidden_state).abs().amax() > 1e-3


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
    from polyalign.data.prepare import PreparedData

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
        paired_x = model(**x, memory=list(own_y), memory_mask=y["attention_mask"]).last_hidden_state
    C = model.config.hidden_size
    assert features_x.shape == (2, 5, 2 * C) and features_y.shape == (2, 8, 2 * C)
    torch.testing.assert_close(features_x[..., :C], own_x)  # [H^L_x : S^L_x], computed unpadded
    torch.testing.assert_close(features_x[..., C:], paired_x)

    classifier = PlugInClassifier(model.train(), num_labels=3)
    logits_x, logits_y = classifier(x, y)
    assert logits_x.shape == logits_y.shape == (2, 3)
    torch.nn.functional.cross_entropy(logits_x, torch.tensor([0, 2])).backward()
    assert model.encoder.layers[0].cross_attention.key_value.weight.grad.abs().sum() > 0


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
        torch.testing.assert_close(seq2seq.encode(x)[-1], plug_out(model)(**x).last_hidden_state)
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


def test_veco_recipe_trains_and_train_only_holds_all_but_cross_attention(sample_prepared, tmp_path):
    overrides = tiny_recipe_overrides(sample_prepared, steps=2)
    pretrain(load_recipe("veco", overrides), tmp_path / "veco", progress=False)
    records = [json.loads(line) for line in (tmp_path / "veco" / "metrics.jsonl").read_text().splitlines()]
    assert "ca_mlm_adjacent/loss" in records[0] and "ca_mlm/loss" not in records[0]  # step 1: monolingual pairs
    assert "ca_mlm/loss" in records[1] and "tlm/loss" in records[1]  # step 2: translation pairs + TLM
    assert all(np.isfinite(r["loss"]) for r in records)

    start = latest_checkpoint(tmp_path / "veco")
    held = ["trainer.train_only=[cross_attention]", "trainer.train_only_until=10", f"init_from={start}"]
    pretrain(load_recipe("veco", overrides + held), tmp_path / "cross-only", progress=False)
    before, after = load_model(start).model.state_dict(), load_model(tmp_path / "cross-only").model.state_dict()
    for name, value in before.items():
        if "cross_attention" in name and name.endswith("weight") and "norm" not in name:
            assert not torch.equal(value, after[name]), name
        elif "cross_attention" not in name:
            torch.testing.assert_close(value, after[name], rtol=0, atol=0)
