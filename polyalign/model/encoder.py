"""The Transformer encoder every polyalign method trains: embeddings -> attention -> layer -> encoder.

Reads top-down. Features any recipe can switch on through `EncoderConfig`:
- learned absolute position embeddings (BERT, XLM-R), or none, leaving word order to a position bias;
- an arbitrary per-example attention mask, (B, T) padding or (B, T, T) "query i may see key j", so
  objectives such as CAMLM and BTMLM are masks, not new models;
- packed rows: several examples side by side in a row, `example_ids` keeping each one's attention to itself
  (FlexAttention's block mask on CUDA, a materialised mask elsewhere);
- language embeddings (XLM), token-type embeddings (BERT), factorised embeddings (ELECTRA);
- post-LN (BERT, XLM-R) or pre-LN layers;
- an additive position bias per layer (relative, gated relative: XLM-E §3.3);
- a cross-attention sublayer per layer (VECO §2.1), used only when memory states are passed in; every layer
  reads the same memory (VECO §2.2: the partner's last layer; a decoder: the encoder's final output).
The weight layout follows BERT/XLM-R closely enough that Hugging Face checkpoints map onto it one-to-one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn
from torch.nn.attention.flex_attention import BlockMask

from polyalign.data.packing import UNPADDING_INPUTS
from polyalign.model.packed_attention import flex_attention_fits, flex_attention_for, packed_attention_mask
from polyalign.model.position_bias import build_position_bias
from polyalign.model.unpadded import Unpadded, pad, unpad, varlen_fits
from polyalign.model.vocabulary import padded_rows


@dataclass
class EncoderConfig:
    vocab_size: int = 32000
    """The tokenizer's vocabulary, special tokens included: the token ids the model reads and predicts."""
    vocab_row_multiple: int = 64
    """The embedding table and the tied output layer hold `vocab_size` rounded up to a multiple of this, so that
    the MLM head's matrix products run on a GPU's tensor-core kernels; the extra rows are never read or
    predicted, and state dicts hold `vocab_size` rows (see model/vocabulary.py). 1 switches the padding off."""
    hidden_size: int = 384
    """Width of the hidden states (d_model); a multiple of num_heads."""
    num_layers: int = 6
    """Transformer layers (blocks of attention + feed-forward)."""
    num_heads: int = 6
    """Attention heads per layer, each hidden_size / num_heads wide."""
    ffn_size: int = 1536
    """Inner width of the feed-forward sublayer (4 x hidden_size in BERT and XLM-R)."""
    dropout: float = 0.1
    """Dropout probability on the embeddings and on every sublayer's output."""
    attention_dropout: float = 0.1
    """Dropout probability on the attention weights."""
    max_positions: int = 512
    """Longest input, in positions; also the rows the learned position table covers (beyond `position_offset`)."""
    absolute_positions: bool = True
    """Add a learned absolute position embedding to each token (BERT, XLM-R). `false` leaves word order to the
    attention's position bias alone (T5; the `xlm-e` recipe), so it needs a `position_bias`."""
    position_offset: int = 0
    """Row of the position table used for position 0 (XLM-R starts at padding_idx + 1 = 2)."""
    num_languages: int = 0
    """Size of the language-embedding table; 0 switches language embeddings off (XLM-R, mBERT)."""
    type_vocab_size: int = 1
    """Token-type (segment) embeddings as in BERT; 0 switches them off."""
    embedding_size: int = 0
    """Width of token embeddings if different from hidden_size (ELECTRA); 0 means hidden_size."""
    norm: str = "post"
    """`post`: LayerNorm after each residual (BERT, XLM-R); `pre`: before each sublayer, plus a final one."""
    layer_norm_eps: float = 1e-5
    """Added to the variance in every LayerNorm."""
    pad_token_id: int = 1
    """Padding token id: its embedding row starts at zero and gets no gradient (XLM-R: 1)."""
    position_bias: str = "none"
    """Additive attention bias from relative positions: `none`, `relative`, or `gated_relative` (XLM-E)."""
    relative_buckets: int = 32
    """Buckets of the relative position bias, half per direction (T5 §2.1); unused with position_bias `none`."""
    relative_max_distance: int = 128
    """Distance, in tokens, from which on relative positions share the last bucket (T5 §2.1)."""
    cross_attention: bool = False
    """Give each layer a cross-attention sublayer (VECO); it runs only when memory states are passed."""
    initializer_range: float = 0.02
    """Standard deviation of the normal initialisation of linear and embedding weights (BERT's 0.02)."""

    def __post_init__(self) -> None:
        # Sizes together: a zero or negative one would otherwise fail deep inside torch (a division by zero, a
        # negative dimension) instead of naming the field.
        sizes = ("vocab_size", "hidden_size", "num_layers", "num_heads", "ffn_size", "max_positions")
        for name in sizes:
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: must be at least 1")
        counts = ("position_offset", "num_languages", "type_vocab_size", "embedding_size", "relative_buckets")
        for name in (*counts, "relative_max_distance"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)}: must be at least 0")
        if not (0 <= self.dropout < 1 and 0 <= self.attention_dropout < 1):
            raise ValueError(
                f"dropout={self.dropout}, attention_dropout={self.attention_dropout}: need 0 <= dropout < 1"
            )
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}")
        if self.vocab_row_multiple < 1:
            raise ValueError(f"vocab_row_multiple={self.vocab_row_multiple}: use 1 (no padding) or more, e.g. 64")
        if self.norm not in ("post", "pre"):
            raise ValueError(f"norm={self.norm!r}: use 'post' or 'pre'")
        if not self.absolute_positions and self.position_bias == "none":
            raise ValueError(
                "absolute_positions=false with position_bias='none' leaves the model blind to word order: "
                "set position_bias (relative or gated_relative) or keep absolute_positions"
            )

    @property
    def embedding_rows(self) -> int:
        """Rows of the token-embedding table and the output layer: `vocab_size` padded."""
        return padded_rows(self.vocab_size, self.vocab_row_multiple)

    @property
    def embedding_width(self) -> int:
        return self.embedding_size or self.hidden_size

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> EncoderConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown encoder config fields {sorted(unknown)}; known: {sorted(known)}")
        return cls(**d)


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor  # (B, T, C)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings output, then each layer: L + 1 items


# ---------------------------------------------------------------------------------------------------------


class Dropout(nn.Dropout):
    """Inverted dropout, as nn.Dropout, with a mask that is ~4x cheaper to draw on a CPU.

    torch's CPU `bernoulli_` draws one Mersenne-Twister number per element, serially (its vectorised MKL path
    is Intel-only): a tenth of a CPU MLM step. Here one 64-bit draw gives four 16-bit uniform integers, so p
    is resolved to 1/65536. Same expectation, same torch generator (seeding and exact resume unchanged).
    A subclass of nn.Dropout, so code that finds dropout modules by type (fine-tuning's rate override) finds it.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)  # fused kernels on accelerators
        n = x.numel()
        bits = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)  # 64 random bits per draw
        uniform = bits.view(torch.int16)[:n].view(x.shape)  # four uniform 16-bit integers per draw
        keep = uniform >= round(self.p * 65536) - 32768
        return x * torch.where(keep, torch.tensor(1 / (1 - self.p), dtype=x.dtype), torch.tensor(0, dtype=x.dtype))

    def extra_repr(self) -> str:
        return f"p={self.p}"


EXPLICIT_ATTENTION_MAX = 256 * 256
"""Largest T x S for which CPU attention runs as explicit matmul-softmax-matmul (see `attend`)."""


def attend(q, k, v, mask, dropout: Dropout) -> torch.Tensor:
    """softmax(q kᵀ / √hs + mask) v for q (B, H, T, hs), k and v (B, H, S, hs); `mask` is boolean (True = may
    see) or additive, broadcastable to (B, H, T, S), or None (all see all: on CUDA, flash attention's case;
    with a mask SDPA takes the memory-efficient kernel), or a FlexAttention BlockMask (packed rows; no attention
    dropout, see `packed_attention_mask`). Returns (B, H, T, hs).

    On a CPU, for pre-training lengths, three plain ops (bf16 matmuls under autocast, fp32 softmax, as
    transformers' eager attention) run forward + backward ~2.5x faster than SDPA's fused kernel and allow
    attention dropout. They keep (B, H, T, S) weights for backward, so long inputs and GPUs use SDPA, and so
    does inference (no autograd), where the fused forward is the faster one.
    """
    if isinstance(mask, BlockMask):
        return flex_attention_for(q.device.type)(q, k, v, block_mask=mask)
    T, S = q.shape[-2], k.shape[-2]
    if q.device.type != "cpu" or T * S > EXPLICIT_ATTENTION_MAX or not torch.is_grad_enabled():
        p = dropout.p if dropout.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
    if (
        mask is not None and mask.dtype == torch.bool
    ):  # additive fp32 form, so that one add both masks and upcasts the scores
        mask = torch.zeros(mask.shape, device=mask.device).masked_fill_(~mask, float("-inf"))
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-1, -2)  # (B, H, T, S)
    if mask is not None:
        scores = scores + mask.float()
    weights = torch.softmax(scores.float(), dim=-1).to(v.dtype)  # softmax in fp32
    return dropout(weights) @ v


class Embeddings(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        E = c.embedding_width
        self.word = nn.Embedding(c.embedding_rows, E, padding_idx=c.pad_token_id)  # padded: see model/vocabulary.py
        self.position = nn.Embedding(c.max_positions + c.position_offset, E) if c.absolute_positions else None
        self.token_type = nn.Embedding(c.type_vocab_size, E) if c.type_vocab_size else None
        self.language = nn.Embedding(c.num_languages, E) if c.num_languages else None
        self.norm = nn.LayerNorm(E, eps=c.layer_norm_eps)
        self.dropout = Dropout(c.dropout)
        self.project = nn.Linear(E, c.hidden_size) if c.hidden_size != E else None
        self.position_offset = c.position_offset

    def forward(self, input_ids, position_ids, token_type_ids=None, language_ids=None):
        x = self.word(input_ids)
        if self.position is not None:
            x = x + self.position(position_ids + self.position_offset)
        if self.token_type is not None:
            types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
            x = x + self.token_type(types)
        if self.language is not None and language_ids is not None:
            x = x + self.language(language_ids)
        x = self.dropout(self.norm(x))
        return self.project(x) if self.project is not None else x


class Attention(nn.Module):
    """Multi-head attention (see `attend`).

    Self-attention uses one fused q/k/v projection (one matmul instead of three); cross-attention projects
    queries from x and keys/values from `memory`.
    """

    def __init__(self, c: EncoderConfig, cross: bool = False):
        super().__init__()
        C = c.hidden_size
        self.num_heads, self.cross = c.num_heads, cross
        self.attention_dropout = Dropout(c.attention_dropout)
        if cross:
            self.query = nn.Linear(C, C)
            self.key_value = nn.Linear(C, 2 * C)
        else:
            self.qkv = nn.Linear(C, 3 * C)
        self.output = nn.Linear(C, C)
        self.position_bias = None if cross else build_position_bias(c)

    def forward(self, x, mask, memory=None, position_ids=None, unpadded: Unpadded | None = None):
        """x (B, T, C), or (N, C) real tokens with `unpadded` saying where they lie (model/unpadded.py)."""
        H, C = self.num_heads, x.shape[-1]
        if unpadded is not None:
            q, k, v = self.qkv(x).view(-1, 3, H, C // H).unbind(1)  # 3 x (N, H, hs)
            y = unpadded.attend(q, k, v, lambda q, k, v: self.attend_rows(q, k, v, mask, position_ids))
            return self.output(y.flatten(1))  # (N, C)
        B, T, _ = x.shape
        if self.cross:
            S = memory.shape[1]
            q = self.query(x).view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, hs)
            k, v = self.key_value(memory).view(B, S, 2, H, C // H).permute(2, 0, 3, 1, 4)  # 2 x (B, H, S, hs)
        else:
            q, k, v = self.qkv(x).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, hs)
        y = self.attend_rows(q, k, v, mask, position_ids)  # (B, H, T, hs)
        return self.output(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)

    def attend_rows(self, q, k, v, mask, position_ids) -> torch.Tensor:
        """Attention of (B, H, T, hs) q over (B, H, S, hs) k, v under the rows' mask, with the position bias."""
        if self.position_bias is not None and self.position_bias.fused(self.attention_dropout):
            return self.position_bias.attend(q, k, v, mask, position_ids)  # (B, H, T, hs), FlexAttention
        if self.position_bias is not None:
            bias = self.position_bias(q, position_ids)  # (B or 1, H, T, T)
            # (B, H, T, T): bias where allowed, -inf elsewhere
            mask = bias if mask is None else torch.where(mask, bias, float("-inf"))
        return attend(q, k, v, mask, self.attention_dropout)  # (B, H, T, hs)


class FeedForward(nn.Module):
    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.up = nn.Linear(c.hidden_size, c.ffn_size)
        self.down = nn.Linear(c.ffn_size, c.hidden_size)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Layer(nn.Module):
    compile_regions = ("forward",)  # one compiled graph serves every layer (model/compiling.py)

    def __init__(self, c: EncoderConfig):
        super().__init__()
        self.pre_norm = c.norm == "pre"
        self.attention = Attention(c)
        self.attention_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        if c.cross_attention:
            self.cross_attention = Attention(c, cross=True)
            self.cross_attention_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        else:
            self.cross_attention = None
        self.feed_forward = FeedForward(c)
        self.feed_forward_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = Dropout(c.dropout)

    def _sublayer(self, x, norm, fn):
        if self.pre_norm:
            return x + self.dropout(fn(norm(x)))
        return norm(x + self.dropout(fn(x)))

    def forward(self, x, mask, position_ids=None, memory=None, memory_mask=None, unpadded=None):
        """position_ids: what the attention's position bias reads (None: the columns); x (N, C) with `unpadded`."""
        attention = lambda h: self.attention(h, mask, position_ids=position_ids, unpadded=unpadded)  # noqa: E731
        x = self._sublayer(x, self.attention_norm, attention)
        if memory is not None:
            if self.cross_attention is None:
                raise ValueError(
                    "memory states were passed but the encoder has no cross-attention (cross_attention: true)"
                )
            x = self._sublayer(
                x, self.cross_attention_norm, lambda h: self.cross_attention(h, memory_mask, memory=memory)
            )
        return self._sublayer(x, self.feed_forward_norm, self.feed_forward)


def expand_attention_mask(attention_mask: torch.Tensor | None, B: int, T: int, S: int, device) -> torch.Tensor | None:
    """Turn a (B, S) key-padding mask or a (B, T, S) query-key mask into SDPA's boolean (B, 1, T|1, S); None
    (no mask: every query sees every key) stays None, so that CUDA attention may use the flash kernel.

    A query row that may see nothing (a padding query under a full mask) is allowed to see itself, because
    softmax over nothing is NaN; its output is padding and never used.
    """
    if attention_mask is None:
        return None
    m = attention_mask.to(device=device, dtype=torch.bool)
    if m.dim() == 2:
        return m[:, None, None, :]  # (B, 1, 1, S)
    if m.dim() != 3:
        raise ValueError(f"attention_mask must be (B, T) or (B, T, T), got shape {tuple(m.shape)}")
    if T == S:
        empty = ~m.any(dim=-1, keepdim=True)  # (B, T, 1)
        m = m | (empty & torch.eye(T, dtype=torch.bool, device=device))
    return m[:, None]  # (B, 1, T, S)


class Encoder(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.norm == "pre" else None
        self.checkpoint_layers = False
        """Recompute each layer in backward instead of keeping its activations (set by the trainer's
        `activation_checkpointing`): ~1/3 more compute for memory that no longer grows with depth."""
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
            if module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        language_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        memory: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        num_layers: int | None = None,
        example_ids: torch.Tensor | None = None,
        consecutive_positions: bool = False,
        token_index: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        max_seqlen: int | None = None,
    ) -> EncoderOutput:
        """input_ids (B, T). attention_mask: (B, T) True at real tokens, or (B, T, T) True where query i may
        attend key j. example_ids (B, T), instead of attention_mask: packed rows, each token's example (-1 at
        padding), attention kept inside each (see polyalign/data/packing.py). memory: states (B, S, C) that
        every layer's cross-attention sublayer reads keys and values from (VECO §2.2: the partner's last layer
        H^L), with memory_mask (B, S) or (B, T, S). num_layers: run only the first layers (e.g. an aligner reading
        layer 3 of 6); the states computed are those of the full model. consecutive_positions: the loader found that
        within every example position_ids rise by one per column, so a position bias may read relative positions
        as column differences (model/position_bias.py). token_index, cu_seqlens, max_seqlen: the batch's real tokens
        and its examples (model/unpadded.py): every dense layer then runs on the real tokens alone, and the states
        come back laid into (B, T, C) rows, zeros at padding."""
        B, T = input_ids.shape
        # What a position bias reads: None = the columns, one bucket gather per layer for the whole batch.
        relative_positions = None if position_ids is None or consecutive_positions else position_ids
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        unpadded = None
        if token_index is not None:
            if memory is not None:
                raise ValueError("unpadded batches (token_index) have no cross-attention memory; pass padded rows")
            varlen = varlen_fits(self.config, self.training, input_ids.device)
            unpadded = Unpadded(token_index, cu_seqlens, max_seqlen, B, T, varlen)
        if unpadded is not None and unpadded.varlen:
            mask = None  # each example's attention is its cu_seqlens span
        elif example_ids is None:
            mask = expand_attention_mask(attention_mask, B, T, T, input_ids.device)
        elif attention_mask is not None:
            raise ValueError("pass attention_mask or example_ids (packed rows), not both")
        else:
            flex = flex_attention_fits(self.config, self.training, input_ids.device) and unpadded is None
            mask = packed_attention_mask(example_ids, flex)
        if memory is not None:
            if not isinstance(memory, torch.Tensor) or memory.dim() != 3:
                raise ValueError("memory must be one (B, S, C) tensor, read by every layer's cross-attention")
            memory_mask = expand_attention_mask(memory_mask, B, T, memory.shape[1], input_ids.device)

        inputs = (input_ids, position_ids, token_type_ids, language_ids)
        if unpadded is not None:  # (B, T) -> (N,): the real tokens
            inputs = tuple(None if t is None else unpad(t, token_index) for t in inputs)
        x = self.embeddings(*inputs)  # (B, T, C), or (N, C) unpadded
        hidden_states = [x] if output_hidden_states else None
        for layer in self.layers[:num_layers]:
            args = (x, mask, relative_positions, memory, memory_mask, unpadded)
            if self.checkpoint_layers and self.training and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(layer, *args, use_reentrant=False)
            else:
                x = layer(*args)
            if output_hidden_states:
                hidden_states.append(x)
        if self.final_norm is not None and (num_layers is None or num_layers >= len(self.layers)):
            x = self.final_norm(x)
            if output_hidden_states:
                hidden_states[-1] = x
        if unpadded is not None:  # (N, C) -> (B, T, C), what objectives read
            x = pad(x, token_index, B, T)
            hidden_states = [pad(h, token_index, B, T) for h in hidden_states] if output_hidden_states else None
        return EncoderOutput(x, tuple(hidden_states) if output_hidden_states else None)


ROW_INPUTS = ("input_ids", "attention_mask", "position_ids", "language_ids", "token_type_ids", "example_ids")
MODEL_INPUTS = (*ROW_INPUTS, "consecutive_positions", *UNPADDING_INPUTS)
"""The entries of a batch that are keyword arguments of `Encoder.forward`."""


def model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The entries of a batch the encoder takes as keyword arguments. A batch the loader found free of padding
    goes without its attention mask, which lets SDPA pick the flash kernel on CUDA; so does a packed one, whose
    `example_ids` say what each token may see."""
    drop = "attention_mask" if batch.get("padding_free") or "example_ids" in batch else None
    return {k: v for k, v in batch.items() if k in MODEL_INPUTS and k != drop}
