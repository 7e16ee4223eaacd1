"""Models: the encoder, its heads, and the model every objective receives."""

from __future__ import annotations

from torch import nn

from polyalign.model.encoder import Encoder, EncoderConfig, EncoderOutput, model_inputs
from polyalign.model.heads import MaskedLMHead

__all__ = ["Encoder", "EncoderConfig", "EncoderOutput", "MaskedLanguageModel", "model_inputs"]


class MaskedLanguageModel(nn.Module):
    """The encoder plus its tied MLM head: what pre-training trains and what a checkpoint holds."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.lm_head = MaskedLMHead(config, self.encoder.embeddings.word)

    def forward(self, input_ids, **kwargs) -> EncoderOutput:
        return self.encoder(input_ids, **kwargs)

    def mlm_logits(self, hidden):
        return self.lm_head(hidden)
