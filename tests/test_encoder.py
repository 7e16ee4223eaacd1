import pytest
import torch

from polyalign.model import Encoder, MaskedLanguageModel
from tests.conftest import tiny_config


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_padding_does_not_influence_real_tokens(norm):
    torch.manual_seed(0)
    enc = Encoder(tiny_config(norm=norm)).eval()
    ids = torch.randint(5, 99, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[:, 5:] = False
    a = enc(ids, attention_mask=mask).last_hidden_state
    ids2 = ids.clone()
    ids2[:, 5:] = torch.randint(5, 99, (2, 2))
    b = enc(ids2, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(a[:, :5], b[:, :5])


@pytest.mark.parametrize("bias", ["none", "relative"])
def test_a_key_blocked_by_a_full_mask_has_no_influence(bias):
    torch.manual_seed(0)
    enc = Encoder(tiny_config(position_bias=bias)).eval()
    T = 8
    ids = torch.randint(5, 99, (1, T))
    mask = torch.zeros(1, T, T, dtype=torch.bool)
    mask[0, :4, :4] = True  # two blocks, {0..3} and {4..7}, that cannot see each other
    mask[0, 4:, 4:] = True
    a = enc(ids, attention_mask=mask).last_hidden_state
    ids2 = ids.clone()
    ids2[0, 4:] = torch.randint(5, 99, (4,))
    b = enc(ids2, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(a[0, :4], b[0, :4])
    assert not torch.allclose(a[0, 4:], b[0, 4:])


def test_hidden_states_and_tied_head():
    model = MaskedLanguageModel(tiny_config())
    out = model(torch.randint(5, 99, (2, 5)), output_hidden_states=True)
    assert len(out.hidden_states) == 3 and out.hidden_states[-1] is out.last_hidden_state
    assert model.lm_head.decoder.weight is model.encoder.embeddings.word.weight
    assert model.mlm_logits(out.last_hidden_state[0]).shape == (5, 99)


def test_language_embeddings_change_the_output():
    torch.manual_seed(0)
    enc = Encoder(tiny_config(num_languages=3)).eval()
    ids = torch.randint(5, 99, (1, 5))
    a = enc(ids, language_ids=torch.zeros_like(ids)).last_hidden_state
    b = enc(ids, language_ids=torch.ones_like(ids)).last_hidden_state
    assert not torch.allclose(a, b)


def test_fully_blocked_padding_rows_stay_finite():
    enc = Encoder(tiny_config()).eval()
    mask = torch.zeros(1, 4, 4, dtype=torch.bool)
    mask[0, :2, :2] = True
    out = enc(torch.randint(5, 99, (1, 4)), attention_mask=mask).last_hidden_state
    assert torch.isfinite(out).all()
