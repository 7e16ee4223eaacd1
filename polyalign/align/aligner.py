"""Word alignments for pre-tokenised sentence pairs from the hidden states of any polyalign model.

One encoder call per batch of pairs gives every layer up to the deepest one asked for, so a layer sweep and
several methods cost one encoding pass. An aligner reads as `resolve_reading` (align/reading.py) says, from the
model folder's alignment.json and the arguments given, once, when it is made; a call that names another method or
layer reads with a copy and leaves the aligner as it was.
Two ways to encode a pair:
- `pair` (default for `ot`: XLM-Align §3.1 and §4.3, and XLM-Align's released aligner, whose numbers the
  papers' tables report): the concatenated pair `<s> x </s> y </s>` with positions running on, as the released
  aligner lays it out for XLM-R, for every model (each side with its language embedding when the model has
  them). Not XLM's TLM layout, whose positions restart at y: a target word then shares its position embedding
  with the source word at the same index, a diagonal prior no training put there, which lowered small-base's
  AER from 81.4 to 75.8 at its default layer (8.6 points at the embeddings) without a step of training;
- `separate` (default for `argmax`/`itermax`/`softmax`, as SimAlign, awesome-align): `<s> x </s>` and
  `<s> y </s>` as two rows of the same batch, each with its own language embedding.
The encoder runs in bf16 on length-sorted batches; the alignment math (align/extract.py) and the lifting to
words run on the padded batch with masks; only output formatting loops over pairs.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from polyalign.align.extract import METHODS, OTSettings, link_probabilities, subword_links
from polyalign.align.reading import ReadingFlags, resolve_reading
from polyalign.align.words import (
    gather_side,
    lift_max_to_words,
    lift_to_words,
    link_lists,
    pad_word_ids,
    side_positions,
    values_at_links,
)
from polyalign.checkpoint import LoadedModel
from polyalign.data.batching import length_batches
from polyalign.data.layout import TLM_STYLES, pair_layout, sentence_layout
from polyalign.io import DataError
from polyalign.progress import tqdm

PAIR_STYLE = "ppa"
"""The layout of `pair` encoding for every model: positions run on across the pair (see the module docstring)."""
PROTOCOL_VERSION = 4
"""The version of what an aligner computes, written into every alignment evaluation so that results computed
otherwise can be told apart. 1: `ot` filters as Eq. (9) reads literally; a model with language embeddings encodes
a `pair` in XLM's TLM layout (positions restarting at y); every piece may take links. 2: `ot` filters with Itermax
on A*, as XLM-Align's released iter_max (extract.py). 3: `pair` encoding in one layout for every model,
`<s> x </s> y </s>` with positions running on (PAIR_STYLE). 4: a bare "▁" piece inside a longer word is encoded
but never linked (`unlink_bare_boundaries`)."""
PRECISIONS = ("bf16", "fp32")
Links = list[tuple[int, int]]


@dataclass
class EncodedPair:
    source_ids: list[int]
    source_words: list[int]  # word index of each token
    target_ids: list[int]
    target_words: list[int]
    num_source: int  # words in the sentence (a word cut off by truncation keeps its index but has no tokens)
    num_target: int
    cut_source: int = 0  # words that lost every linkable token to truncation, so they cannot be linked
    cut_target: int = 0


class Aligner:
    """Aligns batches of word-split sentence pairs with a loaded model (see the module docstring)."""

    def __init__(
        self,
        loaded: LoadedModel,
        encoding: str | None = None,
        batch_tokens: int = 8192,
        precision: str = "bf16",
        settings: OTSettings = OTSettings(),
        pair_style: str = PAIR_STYLE,
        softmax_threshold: float | None = None,
        method: str | None = None,
        layer: int | None = None,
    ):
        """`encoding`, `softmax_threshold`, `method`, `layer`: the reading's flags (None: the folder's alignment.json,
        else the fallback; `resolve_reading`). `pair_style`: the `pair` layout (data/layout.py's TLM styles);
        anything but the default is for measuring what the layout itself does."""
        if pair_style not in TLM_STYLES:
            raise DataError(f"pair_style {pair_style}: use one of {', '.join(TLM_STYLES)}")
        if precision not in PRECISIONS:
            raise DataError(f"--precision {precision}: use one of {', '.join(PRECISIONS)}")
        self.num_layers = loaded.model.config.num_layers
        self.flags = ReadingFlags(method, layer, softmax_threshold, encoding)
        self.reading = resolve_reading(loaded.folder, self.num_layers, self.flags)
        self.pair_style, self.loaded, self.batch_tokens, self.settings = pair_style, loaded, batch_tokens, settings
        self.model = loaded.model.eval()
        if precision == "bf16":
            # The whole encoder in bf16, a copy (the caller's model stays as it is): inference needs no fp32
            # master weights, and autocast's fp32 residual stream would cast every linear layer's input and
            # LayerNorm's output back and forth.
            self.model = copy.deepcopy(self.model).to(torch.bfloat16)
        self.special = loaded.tokenizer.special
        self.device = next(self.model.parameters()).device
        self.truncated = 0  # pairs whose tokens had to be cut to fit the position table

    def reading_as(self, **flags) -> Aligner:
        """The same aligner (sharing the model) reading with these flags on top of its own, e.g.
        `reading_as(softmax_threshold=0.1)`; this aligner is left as it is."""
        other = copy.copy(self)
        other.flags = dataclasses.replace(self.flags, **flags)
        other.reading = resolve_reading(self.loaded.folder, self.num_layers, other.flags)
        return other

    @property
    def encoding(self) -> str:
        return self.reading.encoding

    @property
    def softmax_threshold(self) -> float:
        return self.reading.softmax_threshold

    @property
    def default_method(self) -> str:
        return self.reading.method

    @property
    def default_layer(self) -> int:
        return self.reading.layer

    # -----------------------------------------------------------------------------------------------------

    def encode_words(self, pairs: Sequence[tuple[list[str], list[str]]]) -> list[EncodedPair]:
        """Tokenise each side word by word (exact word boundaries), truncating to the position table."""
        check_word_lists(pairs)
        tok = self.loaded.tokenizer
        sources = [unlink_bare_boundaries(ids, words, tok) for ids, words in tok.encode_words([s for s, _ in pairs])]
        targets = [unlink_bare_boundaries(ids, words, tok) for ids, words in tok.encode_words([t for _, t in pairs])]
        P = self.model.config.max_positions
        out = []
        for (s, t), (si, sw), (ti, tw) in zip(pairs, sources, targets, strict=True):
            if self.encoding == "pair" and self.pair_style == "ppa":  # <s> x </s> y </s>, positions run on
                n = min(len(si), max((P - 3) // 2, P - 3 - len(ti)))
                m = min(len(ti), P - 3 - n)
            else:  # every sentence restarts at position 0
                n, m = min(len(si), P - 2), min(len(ti), P - 2)
            self.truncated += (n, m) != (len(si), len(ti))
            cut = words_cut(sw, n), words_cut(tw, m)
            out.append(EncodedPair(si[:n], sw[:n], ti[:m], tw[:m], len(s), len(t), *cut))
        return out

    def _language_ids(self, languages: tuple[str, str] | None) -> tuple[int, int] | None:
        """Language-embedding ids of both sides, or None (no language embeddings for either side) when the
        model has none or does not know one of the languages."""
        if languages is None:
            return None
        ids = self.loaded.language_id(languages[0]), self.loaded.language_id(languages[1])
        return None if None in ids else ids

    @torch.inference_mode()
    def _side_states(self, batch: list[EncodedPair], layers: list[int], lang: tuple[int, int] | None):
        """Run the encoder once, up to the deepest layer asked for; returns source and target token states
        (Ly, B, n|m, C) and their masks."""
        src = [np.asarray(p.source_ids, dtype=np.int64) for p in batch]
        tgt = [np.asarray(p.target_ids, dtype=np.int64) for p in batch]
        B = len(batch)
        if self.encoding == "separate":
            languages = None if lang is None else np.array([lang[0]] * B + [lang[1]] * B)
            layout = sentence_layout(src + tgt, languages, self.special)
            selected = torch.from_numpy(layout.maskable)  # (2B, T): the sentences' own tokens
        else:
            la = None if lang is None else np.full(B, lang[0])
            lb = None if lang is None else np.full(B, lang[1])
            layout = pair_layout(src, tgt, la, lb, self.special, self.pair_style)
            selected = torch.from_numpy(layout.maskable)
        inputs = {k: v.to(self.device) for k, v in layout.tensors().items() if k != "segment"}
        hidden = self.model(**inputs, output_hidden_states=True, num_layers=max(layers)).hidden_states
        states = torch.stack([hidden[layer] for layer in layers]).float()  # (Ly, rows, T, C)
        if self.encoding == "separate":
            index, mask = side_positions(selected.to(self.device))
            both = gather_side(states, index)  # (Ly, 2B, n, C)
            return both[:, :B], mask[:B], both[:, B:], mask[B:]
        segment = torch.from_numpy(layout.segment).to(self.device)
        s_index, s_mask = side_positions(selected.to(self.device) & (segment == 0))
        t_index, t_mask = side_positions(selected.to(self.device) & (segment == 1))
        return gather_side(states, s_index), s_mask, gather_side(states, t_index), t_mask

    def align_encoded(
        self,
        encoded: list[EncodedPair],
        methods: Sequence[str],
        layers: Sequence[int],
        languages: tuple[str, str] | None = None,
        progress: bool = False,
        with_probabilities: bool = False,
    ) -> dict[tuple[str, int], list]:
        """Word links for every (method, layer) combination, in input order; `with_probabilities`: each pair's
        as (links, the probability of each link: extract.py's `link_probabilities`)."""
        for method in methods:
            if method not in METHODS:
                raise DataError(f"--method {method}: unknown alignment method; use one of {', '.join(METHODS)}")
        layers = list(layers)
        lang = self._language_ids(languages)
        out = {(m, layer): [None] * len(encoded) for m in methods for layer in layers}
        if self.encoding == "separate":
            lengths = [2 * (max(len(p.source_ids), len(p.target_ids)) + 2) for p in encoded]
        else:
            lengths = [len(p.source_ids) + len(p.target_ids) + 4 for p in encoded]
        for idx in tqdm(length_batches(lengths, self.batch_tokens), desc="align", disable=not progress, leave=False):
            batch = [encoded[i] for i in idx]
            source, s_mask, target, t_mask = self._side_states(batch, layers, lang)
            s_words = pad_word_ids([p.source_words for p in batch], s_mask.shape[1]).to(self.device)
            t_words = pad_word_ids([p.target_words for p in batch], t_mask.shape[1]).to(self.device)
            mask = (s_mask & (s_words >= 0))[:, :, None] & (t_mask & (t_words >= 0))[:, None, :]  # (B, n, m)
            Ws, Wt = max(p.num_source for p in batch), max(p.num_target for p in batch)
            if with_probabilities:
                probabilities = link_probabilities(source, target, mask)  # (Ly, B, n, m)
            for method in methods:
                links = subword_links(method, source, target, mask, self.settings, self.softmax_threshold)
                words = lift_to_words(links, s_words, t_words, Ws, Wt)  # (Ly, B, Ws, Wt)
                if with_probabilities:  # a word link's: the largest of its token links' (as awesome-align)
                    word_probabilities = lift_max_to_words(probabilities * links, s_words, t_words, Ws, Wt)
                for k, layer in enumerate(layers):
                    found = link_lists(words[k])
                    if with_probabilities:
                        found = list(zip(found, values_at_links(words[k], word_probabilities[k]), strict=True))
                    for i, pair_links in zip(idx, found, strict=True):
                        out[(method, layer)][i] = pair_links
        return out

    def align(
        self,
        pairs: Sequence[tuple[list[str], list[str]]],
        method: str | None = None,
        layer: int | None = None,
        languages: tuple[str, str] | None = None,
        progress: bool = False,
        with_probabilities: bool = False,
    ) -> list:
        """Word links (i, j) per pair with the aligner's reading, or another `method` / `layer` for this call;
        `with_probabilities`: (links, probabilities) per pair (`align_encoded`)."""
        given = {k: v for k, v in (("method", method), ("layer", layer)) if v is not None}
        aligner = self.reading_as(**given) if given else self
        before = aligner.truncated
        encoded = aligner.encode_words(pairs)
        if aligner is not self:  # the pairs cut to the positions count on this aligner too
            self.truncated += aligner.truncated - before
        method, layer = aligner.reading.method, aligner.reading.layer
        found = aligner.align_encoded(encoded, [method], [layer], languages, progress, with_probabilities)
        return found[(method, layer)]


def check_word_lists(pairs: Sequence) -> None:
    """A TypeError for input that is not (source words, target words) pairs: a string where a word list belongs
    would otherwise be aligned character by character."""
    for k, pair in enumerate(pairs):
        if isinstance(pair, str) or len(pair) != 2:
            raise TypeError(f"pair {k}: expected (source words, target words), got {type(pair).__name__} {pair!r:.60}")
        for side, words in zip(("source", "target"), pair, strict=True):
            if isinstance(words, str) or not all(isinstance(w, str) for w in words):
                raise TypeError(
                    f"pair {k}: the {side} side must be a list of words (strings), not {words!r:.60}; "
                    "split a sentence into words first, e.g. sentence.split()"
                )


def words_cut(word_ids: list[int], kept: int) -> int:
    """Words whose every linkable token lies beyond the first `kept` tokens (lost to truncation)."""
    if kept >= len(word_ids):
        return 0
    return len({w for w in word_ids if w >= 0} - {w for w in word_ids[:kept] if w >= 0})


BARE_BOUNDARY = "▁"
"""SentencePiece's word-boundary mark as a piece of its own: XLM-R's vocabulary splits a word it has no "▁word"
piece for into "▁" + the word, which happens to 40% of the tokens of word-segmented Chinese and Japanese gold."""


def unlink_bare_boundaries(ids: list[int], words: list[int], tokenizer) -> tuple[list[int], list[int]]:
    """Word index -1 (encoded, but never linked) for a bare "▁" piece inside a word that has other pieces: it
    holds no part of the word, yet it would take argmax links and lift them to the word."""
    pieces_per_word = Counter(words)
    out = list(words)
    for k, token in enumerate(ids):
        if pieces_per_word[words[k]] > 1 and tokenizer.id_to_piece(token) == BARE_BOUNDARY:
            out[k] = -1
    return ids, out


def chunks(items: Iterator, size: int) -> Iterator[list]:
    """Consecutive lists of `size` items (the last may be shorter), streaming."""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
