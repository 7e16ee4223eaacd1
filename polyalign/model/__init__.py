"""Models: the encoder, its heads, and the model every objective receives."""

from __future__ import annotations

from torch import nn

from polyalign.model.encoder import Encoder, EncoderConfig, EncoderOutput, model_inputs
from polyalign.model.heads import MaskedLMHead
from polyalign.model.vocabulary import keep_vocabulary_in_state_dicts

VOCABULARY_KEYS = ("encoder.embeddings.word.weight", "lm_head.decoder.weight", "lm_head.decoder.bias")
"""A MaskedLanguageModel's vocabulary-sized tensors, padded inside the model (see model/vocabulary.py)."""

__all__ = ["Encoder", "EncoderConfig", "EncoderOutput", "MaskedLanguageModel", "model_inputs"]


class MaskedLanguageModel(nn.Module):
    """The encoder plus its tied MLM head: what pre-training trains and what a checkpoint holds."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.lm_head = MaskedLMHead(config, self.encoder.embeddings.word)
        keep_vocabulary_in_state_dicts(self, VOCABULARY_KEYS, config.vocab_size, config.embedding_rows)

    def forward(self, input_ids, **kwargs) -> EncoderOutput:
        return self.encoder(input_ids, **kwargs)

    def mlm_logits(self, hidden):
        """hidden (N, C) -> logits (N, vocab_size)."""
        return self.lm_head(hidden)
