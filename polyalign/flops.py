"""Analytic FLOP counts for training steps (a multiply-add is 2 FLOPs; backward = 2x forward).

Used for cumulative training compute (XLM-E Table 2 / Figure 1 compare methods at equal FLOPs) and for
model FLOPs utilisation in the throughput bench. Embedding lookups, LayerNorms and softmaxes are left out,
as in the usual 6·N·D accounting; attention score and value matmuls are counted.
"""

from __future__ import annotations

from polyalign.model.encoder import EncoderConfig


def encoder_forward_flops(c: EncoderConfig, batch: int, length: int, memory_length: int = 0) -> float:
    """Forward FLOPs of the encoder on a (batch, length) input, padding included: what the hardware computes."""
    return encoder_model_flops(c, batch * length, batch * length * length, batch, length, memory_length)


def encoder_model_flops(
    c: EncoderConfig, tokens: int, attention_pairs: int, batch: int = 0, length: int = 0, memory_length: int = 0
) -> float:
    """Forward FLOPs of the encoder's useful work: `tokens` real tokens, and attention over `attention_pairs`
    (query, key) pairs (Σ n² over examples of n tokens: attention inside each example, as packed rows compute it).
    Cross-attention (`memory_length`) is charged on the (batch, length) rows."""
    C, F, L = c.hidden_size, c.ffn_size, c.num_layers
    per_token = 2 * (3 * C * C + C * C + 2 * C * F)  # q/k/v, output projection, feed-forward
    attention = 2 * 2 * attention_pairs * C  # scores q·k and weights·v
    if c.position_bias == "gated_relative":  # XLM-E §3.3 gates: q_i·u and q_i·v per head
        per_token += 2 * C * 2
    flops = L * (tokens * per_token + attention)
    if c.embedding_width != c.hidden_size:
        flops += 2 * tokens * c.embedding_width * C  # embedding projection
    if memory_length:  # cross-attention: q and output from x, k/v from memory, scores against memory
        flops += L * (
            2 * tokens * 2 * C * C + 2 * batch * memory_length * 2 * C * C + 2 * 2 * batch * length * memory_length * C
        )
    return float(flops)


def mlm_head_forward_flops(c: EncoderConfig, predicted_tokens: int) -> float:
    """The MLM head runs only at predicted positions: dense C->E, then E->V."""
    return float(2 * predicted_tokens * (c.hidden_size * c.embedding_width + c.embedding_width * c.vocab_size))


def training_flops(forward_flops: float) -> float:
    """Forward + backward (backward costs about twice the forward)."""
    return 3.0 * forward_flops


def detection_head_forward_flops(c: EncoderConfig, tokens: int) -> float:
    """The replaced-token-detection head (ELECTRA) runs at every position: dense C->C, then C->1."""
    return float(2 * tokens * (c.hidden_size * c.hidden_size + c.hidden_size))


def replaced_token_detection_flops(
    generator: EncoderConfig, discriminator: EncoderConfig, batch: int, length: int, masked_tokens: int
) -> float:
    """Training FLOPs of one ELECTRA step (XLM-E MRTD/TRTD) on a (batch, length) input: the generator with
    its MLM head at the masked positions, plus the discriminator with its detection head at every position,
    each forward and backward. Sampling and the softmax it needs are left out, like every softmax here."""
    return replaced_token_detection_model_flops(
        generator, discriminator, batch * length, batch * length * length, masked_tokens
    )


def replaced_token_detection_model_flops(
    generator: EncoderConfig, discriminator: EncoderConfig, tokens: int, attention_pairs: int, masked_tokens: int
) -> float:
    """`replaced_token_detection_flops` on `tokens` real tokens attending over `attention_pairs` pairs (see
    `encoder_model_flops`): the model's useful work."""
    generator_forward = encoder_model_flops(generator, tokens, attention_pairs) + mlm_head_forward_flops(
        generator, masked_tokens
    )
    discriminator_forward = encoder_model_flops(discriminator, tokens, attention_pairs) + detection_head_forward_flops(
        discriminator, tokens
    )
    return training_flops(generator_forward + discriminator_forward)
