"""A padded vocabulary is invisible: the padded model trains as the unpadded one, and what leaves the model
(state dicts, checkpoint files) holds the tokenizer's size, so unpadded checkpoints load."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

import polyalign.model.heads as heads
from polyalign.checkpoint import load_model_weights, save_weights
from polyalign.model import VOCABULARY_KEYS, MaskedLanguageModel
from polyalign.model.seq2seq import Seq2SeqTransformer
from polyalign.objectives.mlm import masked_lm_loss
from polyalign.train.resume import pad_moments_to_parameters
from tests.conftest import tiny_config

V = 99  # tiny_config's vocabulary: padded to 128 rows


def unpadded_and_padded() -> tuple[MaskedLanguageModel, MaskedLanguageModel]:
    torch.manual_seed(0)
    unpadded = MaskedLanguageModel(tiny_config(vocab_row_multiple=1))
    with torch.no_grad():
        unpadded.lm_head.decoder.bias.normal_()  # a zero bias would hide a bias that is not trimmed or padded
    padded = MaskedLanguageModel(tiny_config())
    padded.load_state_dict(unpadded.state_dict())  # an unpadded state dict loads into the padded model
    return unpadded, padded


def mlm_batch(B: int = 3, T: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, V, (B, T), generator=g)
    labels = torch.full((B, T), -100)
    labels[:, ::3] = torch.randint(0, V, (B, (T + 2) // 3), generator=g)
    labels[0, 0] = V - 1  # the last real token is a target
    return ids, labels


CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")])


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
def test_the_padded_model_has_the_loss_and_gradients_of_the_unpadded_one(monkeypatch, fused, device):
    monkeypatch.setattr(heads, "FUSED_ON_CPU", fused)
    unpadded, padded = (m.to(device) for m in unpadded_and_padded())
    assert padded.encoder.embeddings.word.num_embeddings == 128
    ids, labels = (t.to(device) for t in mlm_batch())
    losses = []
    for model in (unpadded, padded):
        loss, _, n = masked_lm_loss(model, model(ids).last_hidden_state, labels)
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=0)
    grads = dict(padded.named_parameters())
    for name, p in unpadded.named_parameters():
        g = grads[name].grad
        if p.shape[0] == V and g.shape[0] == 128:  # vocabulary rows: the padding gets no gradient
            assert not g[V:].any(), name
            g = g[:V]
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-7, msg=name)
    assert padded.mlm_logits(torch.randn(4, 32, device=device)).shape == (4, V)  # no one sees a padding logit


def test_state_dicts_and_checkpoint_files_hold_the_tokenizer_size(tmp_path):
    unpadded, padded = unpadded_and_padded()
    state = padded.state_dict()
    assert {k: state[k].shape[0] for k in VOCABULARY_KEYS} == dict.fromkeys(VOCABULARY_KEYS, V)
    save_weights(padded, tmp_path / "model.safetensors")
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        names = f.keys()  # a safetensors file is no mapping
        shapes = {k: f.get_slice(k).get_shape()[0] for k in names if k in VOCABULARY_KEYS}
        assert f.metadata() == {"lm_head.decoder.weight": "encoder.embeddings.word.weight"}  # tied: stored once
    assert shapes == {"encoder.embeddings.word.weight": V, "lm_head.decoder.bias": V}
    again = MaskedLanguageModel(tiny_config())
    load_model_weights(again, tmp_path / "model.safetensors", strict=True)
    assert again.lm_head.decoder.weight is again.encoder.embeddings.word.weight
    hidden = torch.randn(5, 32)
    torch.testing.assert_close(again.mlm_logits(hidden), unpadded.mlm_logits(hidden), rtol=0, atol=0)


def test_a_checkpoint_saved_without_padding_loads(tmp_path):
    unpadded, _ = unpadded_and_padded()
    save_weights(unpadded, tmp_path / "model.safetensors")  # what a model saved before the padding holds
    padded = MaskedLanguageModel(tiny_config())
    load_model_weights(padded, tmp_path / "model.safetensors", strict=True)
    ids = mlm_batch()[0]
    hidden = padded(ids).last_hidden_state
    torch.testing.assert_close(hidden, unpadded(ids).last_hidden_state, rtol=0, atol=0)
    torch.testing.assert_close(padded.mlm_logits(hidden[0]), unpadded.mlm_logits(hidden[0]), rtol=0, atol=0)


def test_a_seq2seq_model_keeps_its_shared_table_unpadded_in_state_dicts():
    veco = MaskedLanguageModel(tiny_config(cross_attention=True))
    seq2seq = Seq2SeqTransformer.from_encoder(veco)
    state = seq2seq.state_dict()
    for key in ("encoder.embeddings.word.weight", "decoder.embeddings.word.weight", "lm_head.decoder.weight"):
        assert state[key].shape[0] == V
        torch.testing.assert_close(state[key], veco.state_dict()["encoder.embeddings.word.weight"], rtol=0, atol=0)


def test_optimizer_moments_saved_without_padding_resume_with_zero_padding_rows():
    unpadded, padded = unpadded_and_padded()
    saved = torch.optim.AdamW(unpadded.parameters())
    ids, labels = mlm_batch()
    masked_lm_loss(unpadded, unpadded(ids).last_hidden_state, labels)[0].backward()
    saved.step()  # moments with the tokenizer's 99 rows, as a run saved before the padding holds them
    resumed = torch.optim.AdamW(padded.parameters())
    resumed.load_state_dict(saved.state_dict())
    pad_moments_to_parameters(resumed)
    new = resumed.state[padded.encoder.embeddings.word.weight]
    old = saved.state[unpadded.encoder.embeddings.word.weight]
    for moment in ("exp_avg", "exp_avg_sq"):
        assert new[moment].shape == (128, 32) and not new[moment][V:].any()
        torch.testing.assert_close(new[moment][:V], old[moment], rtol=0, atol=0)
    masked_lm_loss(padded, padded(ids).last_hidden_state, labels)[0].backward()
    resumed.step()  # the moments fit their parameters
