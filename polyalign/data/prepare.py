"""`polyalign prepare`: raw text in, tokenizer plus memory-mapped token shards out.

1) find the corpus files; 2) count lines; 3) sample tokenizer training text across languages with
p_j ∝ m_j^alpha (streaming, block by block) and train a SentencePiece unigram model (or take a given
tokenizer); 4) tokenize every file into shards, streaming in chunks spread over worker processes and written
in order, dropping lines that occur in evaluation sets; 5) write meta.json. Memory does not grow with the
number of lines, and the output does not depend on the number of workers. Everything (the tokenizer's sampled
text too) is written under a temporary name beside --out and renamed into place at the end.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import unicodedata
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from polyalign.data.dev_split import dev_line_numbers, write_dev_pairs
from polyalign.data.prepared import META
from polyalign.data.sampling import language_probabilities
from polyalign.data.shards import ShardWriter, ids_dtype
from polyalign.io import (
    BadLineCounter,
    DataError,
    LinePolicy,
    atomic_dir,
    open_binary,
    read_lines,
    read_parallel,
    read_tsv_pairs,
    write_json,
)
from polyalign.outputs import hold_output
from polyalign.progress import ticking, tqdm
from polyalign.tokenizer import Tokenizer, load_tokenizer, train_sentencepiece

_MONO = re.compile(r"^(?P<lang>[a-z]{2,3}(?:_[A-Za-z]+)?)\.txt(?:\.gz)?$")
_SIDE = re.compile(r"^(?P<a>[a-z]{2,3})-(?P<b>[a-z]{2,3})\.(?P<side>[a-z]{2,3})(?:\.gz)?$")
_TSV = re.compile(r"^(?P<a>[a-z]{2,3})-(?P<b>[a-z]{2,3})\.tsv(?:\.gz)?$")


@dataclass
class ParallelSource:
    src_lang: str
    tgt_lang: str
    src: Path  # for TSV input, src is the TSV file and tgt is None
    tgt: Path | None = None

    @property
    def name(self) -> str:
        return f"{self.src_lang}-{self.tgt_lang}"


@dataclass
class Corpus:
    mono: dict[str, list[Path]] = field(default_factory=dict)
    parallel: list[ParallelSource] = field(default_factory=list)

    @property
    def languages(self) -> list[str]:
        langs = set(self.mono)
        for p in self.parallel:
            langs.update((p.src_lang, p.tgt_lang))
        return sorted(langs)


def discover_corpus(mono: Path | None, parallel: Path | None, languages: list[str] | None = None) -> Corpus:
    """Find `{lang}.txt[.gz]` files in `mono` and `{a}-{b}.{a}` + `{a}-{b}.{b}` (or `{a}-{b}.tsv`) in
    `parallel`. With `languages`, keep only those languages (a pair needs both sides listed)."""
    keep = (lambda lang: True) if not languages else (lambda lang: lang in languages)
    corpus = Corpus()
    if mono is not None:
        if not Path(mono).is_dir():
            raise DataError(f"{mono}: monolingual folder not found")
        for f in sorted(Path(mono).iterdir()):
            m = _MONO.match(f.name)
            if m and keep(m["lang"]):
                corpus.mono.setdefault(m["lang"], []).append(f)
    if parallel is not None:
        if not Path(parallel).is_dir():
            raise DataError(f"{parallel}: parallel folder not found")
        sides: dict[tuple[str, str], dict[str, Path]] = {}
        for f in sorted(Path(parallel).iterdir()):
            if m := _TSV.match(f.name):
                if keep(m["a"]) and keep(m["b"]):
                    corpus.parallel.append(ParallelSource(m["a"], m["b"], f))
            elif (m := _SIDE.match(f.name)) and m["side"] in (m["a"], m["b"]):
                sides.setdefault((m["a"], m["b"]), {})[m["side"]] = f
        for (a, b), files in sorted(sides.items()):
            if not (keep(a) and keep(b)):
                continue
            if len(files) != 2:
                have = next(iter(files.values()))
                missing = b if a in files else a
                raise DataError(f"{have}: its other side `{a}-{b}.{missing}` is missing in {parallel}")
            corpus.parallel.append(ParallelSource(a, b, files[a], files[b]))
    if not corpus.mono and not corpus.parallel:
        raise DataError(f"no corpus files found (mono={mono}, parallel={parallel}, languages={languages})")
    return corpus


# ---------------------------------------------------------------------------------------------------------
# Leak filter: drop training text that occurs in evaluation sets.


def normalise_for_matching(text: str) -> str:
    """NFKC, lower-case, non-word characters removed: the key two sentences must share to count as equal."""
    return re.sub(r"\W+", "", unicodedata.normalize("NFKC", text).lower())


def load_exclusions(paths: list[Path]) -> set[str]:
    keys: set[str] = set()
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise DataError(f"{p}: exclusion file or folder not found")
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if not f.is_file() or f.name.startswith("."):
                continue
            with open_binary(f) as fh:
                for raw in fh:
                    key = normalise_for_matching(raw.decode("utf-8", errors="replace"))
                    if key:
                        keys.add(key)
    return keys


# ---------------------------------------------------------------------------------------------------------


@dataclass
class PrepareConfig:
    out: Path
    vocab_size: int = 32000
    """SentencePiece vocabulary size (ignored with tokenizer_from)."""
    alpha: float = 0.7
    """Language sampling exponent for the tokenizer's training text."""
    tokenizer_sample_lines: int = 2_000_000
    """Lines of language-sampled text to train the tokenizer on."""
    tokenizer_from: Path | None = None
    """Use this tokenizer (a polyalign folder or a local Hugging Face checkpoint) instead of training one."""
    exclude: list[Path] = field(default_factory=list)
    """Evaluation files/folders whose sentences must not appear in training data."""
    policy: LinePolicy = field(default_factory=LinePolicy)
    dev_pairs: int = 0
    """Pairs per en-xx parallel file held out of training and written to dev/ in the Tatoeba layout."""
    chunk_lines: int = 8192
    workers: int = 0
    """Processes that count and tokenize lines (0 = every core this process may use); the output does not
    depend on it."""
    seed: int = 0
    overwrite: bool = False
    progress: bool = True
    """Show progress (tokenizer training, tokenizing)."""


def count_lines(path: Path) -> int:
    n, last = 0, b"\n"
    with open_binary(path) as f:
        while chunk := f.read(1 << 22):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")


def _language_files(corpus: Corpus) -> dict[str, list[tuple[Path, int | None]]]:
    """Every file holding text of a language, with the TSV column for TSV files."""
    files: dict[str, list[tuple[Path, int | None]]] = {
        lang: [(f, None) for f in fs] for lang, fs in corpus.mono.items()
    }
    for p in corpus.parallel:
        if p.tgt is None:
            files.setdefault(p.src_lang, []).append((p.src, 0))
            files.setdefault(p.tgt_lang, []).append((p.src, 1))
        else:
            files.setdefault(p.src_lang, []).append((p.src, None))
            files.setdefault(p.tgt_lang, []).append((p.tgt, None))
    return files


SAMPLE_BLOCK = 1 << 20
"""Lines per block of streaming sampling: memory for the sample's line choice is O(block), not O(corpus)."""


def sample_counts(total: int, want: int, rng: np.random.Generator, block: int = SAMPLE_BLOCK):
    """Yield, block by block over `total` lines, how often each line is picked: `want` distinct lines
    uniformly (without replacement) when want <= total, else `want` draws with replacement (upsampling).

    Each block's share of the picks is drawn first (hypergeometric without replacement, binomial with), then
    the picks within the block, so no array is longer than a block and the result depends only on the seed.
    """
    replace, left = want > total, want
    for start in range(0, total, block):
        size, rest = min(block, total - start), total - start
        if replace:
            k = int(rng.binomial(left, size / rest)) if rest > size else left
            counts = np.bincount(rng.integers(0, size, k), minlength=size)
        else:
            k = int(rng.hypergeometric(size, rest - size, left)) if rest > size else left
            counts = np.zeros(size, dtype=np.int64)
            counts[rng.choice(size, k, replace=False)] = 1
        left -= k
        yield counts


def sample_tokenizer_text(corpus: Corpus, config: PrepareConfig, out_file: Path, pool=None) -> dict[str, int]:
    """Write language-sampled training text for the tokenizer; returns lines written per language."""
    files = _language_files(corpus)
    langs = sorted(files)
    every = sorted({f for fs in files.values() for f, _ in fs})
    lines = dict(zip(every, (pool.map(count_lines, every) if pool else map(count_lines, every)), strict=True))
    counts = {lang: [lines[f] for f, _ in fs] for lang, fs in files.items()}
    probs = language_probabilities([sum(counts[lang]) for lang in langs], config.alpha)
    rng = np.random.default_rng(config.seed)
    # Never more lines than the corpus has: alpha redistributes the sample across languages (upsampling the
    # small ones), but repeating a small corpus up to millions of lines only slows the tokenizer's training.
    sample_size = min(config.tokenizer_sample_lines, sum(sum(c) for c in counts.values()))
    written = {}
    with open(out_file, "w", encoding="utf-8") as out:
        for lang, p in zip(langs, probs, strict=True):
            picks = sample_counts(sum(counts[lang]), int(round(p * sample_size)), rng)
            block, at, n = np.zeros(0, dtype=np.int64), 0, 0  # the current block of pick counts, position in it
            for (f, column), c in zip(files[lang], counts[lang], strict=True):
                with open_binary(f) as fh:
                    for i, raw in enumerate(fh):
                        if i >= c:
                            break
                        if at == len(block):
                            block, at = next(picks), 0
                        reps, at = int(block[at]), at + 1
                        if reps:
                            text = raw.decode("utf-8", errors="ignore").rstrip("\r\n")
                            if column is not None:
                                cols = text.split("\t")
                                text = cols[column] if len(cols) == 2 else ""
                            text = text.strip()
                            if text and len(text) <= config.policy.max_chars:
                                out.write((text + "\n") * reps)
                                n += reps
            written[lang] = n
    return written


def check_parallel_lengths(corpus: Corpus) -> None:
    """Refuse two-file parallel sources whose sides differ in line count, before any tokenizer work."""
    for p in corpus.parallel:
        if p.tgt is None:
            continue
        n_src, n_tgt = count_lines(p.src), count_lines(p.tgt)
        if n_src != n_tgt:
            (short, n_short), (long_, _) = sorted([(p.src, n_src), (p.tgt, n_tgt)], key=lambda x: x[1])
            raise DataError(
                f"{long_}:{n_short + 1}: parallel files differ in length: {short} ends after {n_short} lines; "
                "the two sides must be line-aligned"
            )


def pair_rows(source: ParallelSource, policy: LinePolicy, bad: BadLineCounter | None = None):
    """(line number, source text, target text) of a parallel source's good pairs (see io.read_parallel)."""
    if source.tgt is None:
        return read_tsv_pairs(source.src, policy, bad)
    return read_parallel(source.src, source.tgt, policy, bad)


def check_bad_lines(corpus: Corpus, policy: LinePolicy) -> None:
    """With `--bad-lines error`, read every file once before any work (the tokenizer would otherwise train on
    the bad text first), so that a bad line is the one thing said and nothing is created."""
    if policy.on_bad == "error":
        for f in (f for files in corpus.mono.values() for f in files):
            deque(read_lines(f, policy), maxlen=0)
        for source in corpus.parallel:
            deque(pair_rows(source, policy), maxlen=0)


def tokenizer_folder(path: Path) -> Path:
    """`--tokenizer-from` takes a tokenizer folder or a model folder (its `tokenizer/` subfolder)."""
    return path / "tokenizer" if (path / "tokenizer").is_dir() else path


def worker_count(workers: int) -> int:
    """`workers`, or with 0 every core this process may use."""
    if workers < 0:
        raise DataError(f"--workers {workers}: give a positive number of processes, or 0 for every core")
    return workers or len(os.sched_getaffinity(0))


def prepare(corpus: Corpus, config: PrepareConfig) -> dict:
    """Build the prepared folder `config.out`; returns its meta dictionary."""
    workers = worker_count(config.workers)
    check_parallel_lengths(corpus)
    check_bad_lines(corpus, config.policy)
    source = load_tokenizer(tokenizer_folder(Path(config.tokenizer_from))) if config.tokenizer_from else None
    exclusions = load_exclusions(config.exclude) if config.exclude else set()
    pool = None
    with hold_output(Path(config.out), "polyalign prepare"):  # the command checked it against its inputs
        try:
            start_worker(exclusions)  # in this process (one worker), else in each of the pool's
            spawn = multiprocessing.get_context("spawn")
            pool = spawn.Pool(workers, start_worker, (exclusions,)) if workers > 1 else None
            with atomic_dir(config.out, overwrite=config.overwrite) as tmp:
                tok_dir = tmp / "tokenizer"
                if source is not None:
                    source.save(tok_dir)
                    sampled = {}
                else:  # not under $TMPDIR: a killed prepare's text goes with its folder (hold_output)
                    text = tmp / ".tokenizer_text.txt"
                    with ticking("sample tokenizer text", config.progress):
                        sampled = sample_tokenizer_text(corpus, config, text, pool)
                    with ticking(f"train tokenizer ({sum(sampled.values()):,} lines)", config.progress):
                        train_sentencepiece(text, tok_dir, config.vocab_size)  # threads fixed: same pieces
                    text.unlink()
                meta = tokenize_corpus(corpus, load_tokenizer(tok_dir), config, tmp, pool, 2 * workers)
                meta |= {"tokenizer_sample_lines": sampled, "alpha": config.alpha}
                write_json(tmp / META, meta)
        finally:
            if pool is not None:
                pool.terminate()
    return meta


# Each worker process (or the main one, with one worker) keeps the exclusion keys and a loaded tokenizer.
_WORKER: dict = {}


def start_worker(exclusions: set[str]) -> None:
    _WORKER.clear()
    _WORKER["exclusions"] = exclusions


def encode_chunk(task: tuple[Path, tuple[list[str], ...]]) -> tuple[np.ndarray, list[list[list[int]]]]:
    """(tokenizer folder, rows as columns: 1 for monolingual, 2 for parallel) -> whether each row occurs in
    the evaluation sets (any column), and the token ids of every column of the rows kept."""
    tokenizer_dir, columns = task
    if _WORKER.get("tokenizer_dir") != tokenizer_dir:  # loaded once per worker
        _WORKER["tokenizer"], _WORKER["tokenizer_dir"] = load_tokenizer(tokenizer_dir), tokenizer_dir
    tokenizer, exclusions = _WORKER["tokenizer"], _WORKER["exclusions"]
    leaked = np.array(
        [
            bool(exclusions) and any(normalise_for_matching(t) in exclusions for t in row)
            for row in zip(*columns, strict=True)
        ],
        dtype=bool,
    )
    return leaked, [tokenizer.encode_batch([t for t, bad in zip(c, leaked, strict=True) if not bad]) for c in columns]


def ordered_map(pool, fn, items: Iterable, ahead: int) -> Iterator:
    """fn over items, in order, on the pool with at most `ahead` items in flight (bounded memory; Pool.imap
    would read the whole input ahead); in this process without a pool."""
    if pool is None:
        yield from map(fn, items)
        return
    pending: deque = deque()
    for item in items:
        pending.append(pool.apply_async(fn, (item,)))
        if len(pending) >= ahead:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


def chunked_rows(rows: Iterable[tuple[str, ...]], size: int) -> Iterator[tuple[list[str], ...]]:
    """Rows of texts regrouped as columns of at most `size` rows."""
    chunk: list[tuple[str, ...]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield tuple(map(list, zip(*chunk, strict=True)))
            chunk = []
    if chunk:
        yield tuple(map(list, zip(*chunk, strict=True)))


def tokenize_corpus(
    corpus: Corpus, tokenizer: Tokenizer, config: PrepareConfig, out: Path, pool=None, ahead: int = 2
) -> dict:
    """Tokenize every file into shards: chunks encoded on the pool's workers (see `start_worker`), written in
    order. `tokenizer` is the one saved under out/tokenizer."""
    tok_dir = out / "tokenizer"
    dtype = ids_dtype(tokenizer.special.vocab_size)
    bad = BadLineCounter()
    excluded = 0
    meta: dict = {
        "tokenizer": "tokenizer",
        "dtype": dtype.name,
        "vocab_size": tokenizer.special.vocab_size,
        "languages": corpus.languages,
        "mono": {},
        "parallel": {},
    }

    def bar(rows, desc: str, unit: str):
        return tqdm(rows, desc=desc, unit=unit, leave=False, mininterval=1.0, disable=not config.progress)

    for lang, files in corpus.mono.items():
        writer = ShardWriter(out / "mono" / lang, dtype)
        for f in files:
            rows = ((text,) for _, text in bar(read_lines(f, config.policy, bad), f"tokenize {f.name}", " lines"))
            for leaked, (ids,) in ordered_map(
                pool, encode_chunk, ((tok_dir, c) for c in chunked_rows(rows, config.chunk_lines)), ahead
            ):
                excluded += int(leaked.sum())
                writer.add(ids)
        meta["mono"][lang] = writer.close()

    for p in corpus.parallel:
        wa = ShardWriter(out / "parallel" / f"{p.name}.{p.src_lang}", dtype)
        wb = ShardWriter(out / "parallel" / f"{p.name}.{p.tgt_lang}", dtype)
        rows = pair_rows(p, config.policy, bad)
        held_out = (
            dev_line_numbers(count_lines(p.src), config.dev_pairs, p.name, config.seed) if config.dev_pairs else set()
        )
        dev: list[tuple[str, str]] = []

        def training_rows(rows=rows, held_out=held_out, dev=dev):
            for lineno, a, b in rows:
                if lineno in held_out:
                    dev.append((a, b))
                else:
                    yield a, b

        chunks = chunked_rows(training_rows(bar(rows, f"tokenize {p.name}", " pairs")), config.chunk_lines)
        chunks = ((tok_dir, c) for c in chunks)
        for leaked, (ids_a, ids_b) in ordered_map(pool, encode_chunk, chunks, ahead):
            excluded += int(leaked.sum())
            wa.add(ids_a)
            wb.add(ids_b)
        sa, sb = wa.close(), wb.close()
        if dev and write_dev_pairs(out, p.src_lang, p.tgt_lang, dev):
            meta.setdefault("dev_pairs", {})[p.name] = len(dev)
        meta["parallel"][p.name] = {
            "src": p.src_lang,
            "tgt": p.tgt_lang,
            "lines": sa["lines"],
            "tokens": [sa["tokens"], sb["tokens"]],
        }

    meta["skipped_lines"] = dict(bad.counts)
    meta["skipped_first_at"] = dict(bad.first)
    meta["excluded_as_eval_overlap"] = excluded
    return meta
