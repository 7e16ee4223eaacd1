"""`polyalign fit-aligner`: a word aligner fitted to the user's own bitext, and its links, in one command.

1) check the bitext (two line-aligned files or one `source ||| target` file), the start model, the reading and
every setting before anything is written; 2) prepare the bitext as a parallel corpus with the start's tokenizer;
3) self-train the start on it (recipe `self-align`: awesome-align's objective, embeddings held) for one pass in
16-pair batches, at most the recipe's 1,000 steps, its schedule scaled to the steps; 4) pull the result back towards
the start (WiSE-FT, as `interpolate --weight`); 5) align the bitext with the reading `resolve_reading` gives for the
start's folder and the flags (recorded in the aligner's alignment.json) into OUT/links.txt. As eflomal does, the
links come from a model that has read the bitext it aligns.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from polyalign.align.aligner import PROTOCOL_VERSION, Aligner
from polyalign.align.bitext import Bitext, check_bitext, read_bitext
from polyalign.align.reading import ReadingFlags, model_depth, resolve_reading, write_reading
from polyalign.align.write import align_bitext, report_cut_pairs
from polyalign.checkpoint import load_model, resolve_model_folder
from polyalign.config import load_recipe
from polyalign.data.prepare import PrepareConfig, discover_corpus
from polyalign.data.prepare import prepare as run_prepare
from polyalign.io import DataError, atomic_text_file, write_json
from polyalign.model_folders import interpolate_folders
from polyalign.tables import console
from polyalign.train import pretrain

PAIRS_PER_STEP = 16
"""The `self-align` recipe's batch (awesome-align's small batches)."""
MAX_STEPS = 1000
"""The `self-align` recipe's stop: the step with the lowest mean dev-half AER on the gold sets."""
SCHEDULE_STRETCH = 3
"""`self-align` decays its learning rate over three times the steps it runs (3,000 for 1,000)."""
WEIGHT = 0.5
"""WiSE-FT's halfway point back to the start (the best of the candidates on the gold sets' dev halves)."""
LR = 2e-5
"""The `self-align` recipe's peak learning rate (awesome-align's)."""
LOSS_NOTE = (
    "the loss is minus the mean probability the model gives its own links (awesome-align's objective): "
    "negative, it falls towards -1 as the links sharpen"
)


@dataclass(frozen=True)
class FitSettings:
    steps: int | None = None
    """Self-training steps (default: one pass over the bitext, at most 1,000)."""
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    flags: ReadingFlags = ReadingFlags()
    """The reading to align with, as `align`'s flags (None fields: the start folder's alignment.json, else the
    fallback)."""
    lr: float = LR
    weight: float = WEIGHT
    """WiSE-FT: the aligner is (1 - weight) x start + weight x self-trained."""
    batch_tokens: int = 8192
    """Padded tokens per encoding batch of the aligning."""
    device: str = "cpu"
    """Where the self-training and the aligning run."""
    progress: bool = True


def default_steps(pairs: int) -> int:
    """One pass over the bitext in the recipe's batches, at most its 1,000 steps, at least 1."""
    return max(1, min(MAX_STEPS, math.ceil(pairs / PAIRS_PER_STEP)))


def self_align_overrides(prepared: Path, start: Path, steps: int, lr: float = LR) -> list[str]:
    """The `self-align` recipe on the user's prepared bitext for `steps`, its schedule's shape kept: decay over three
    times the steps run, warm-up a tenth of them (the recipe's 100 of 1,000)."""
    return [
        f"data.prepared={prepared}",
        f"init_from={start}",
        f"trainer.max_steps={SCHEDULE_STRETCH * steps}",
        f"trainer.lr={lr}",
        f"trainer.stop_at={steps}",
        f"trainer.warmup_steps={max(1, steps // 10)}",
        f"trainer.save_every={steps}",
        f"trainer.log_every={max(1, min(20, steps // 10))}",
    ]


def write_parallel(bitext: Bitext, folder: Path, src_lang: str, tgt_lang: str) -> None:
    """The bitext as `prepare` reads a pair: {a}-{b}.{a} and {a}-{b}.{b}, one sentence per line."""
    folder.mkdir(parents=True)
    name = f"{src_lang}-{tgt_lang}"
    with open(folder / f"{name}.{src_lang}", "w") as src, open(folder / f"{name}.{tgt_lang}", "w") as tgt:
        for _, source, target in read_bitext(bitext):
            if not source or not target:  # nothing to learn from (check_bitext named it)
                continue
            src.write(" ".join(source) + "\n")
            tgt.write(" ".join(target) + "\n")


def check_languages(src_lang: str, tgt_lang: str) -> None:
    for option, code in (("--src-lang", src_lang), ("--tgt-lang", tgt_lang)):
        if not (code.isascii() and code.isalpha() and code.islower() and 2 <= len(code) <= 3):
            raise DataError(f"{option} {code}: a language code of 2-3 lowercase letters (e.g. de, en)")
    if src_lang == tgt_lang:
        raise DataError(f"--src-lang and --tgt-lang are both {src_lang}: give the two sides different codes")


def fit_aligner(start: Path, bitext: Bitext, out: Path, settings: FitSettings = FitSettings()) -> dict:
    """Fit, interpolate and align; OUT holds prepared/, run/, aligner/ (the model), links.txt and fit.json."""
    t0 = time.perf_counter()
    if out.exists():
        raise DataError(f"{out}: already exists; choose another --out (nothing was written)")
    check_languages(settings.src_lang, settings.tgt_lang)
    folder = resolve_model_folder(start)  # a missing or wrong start is one line before anything is written
    reading = resolve_reading(folder, model_depth(folder), settings.flags)  # so is a bad reading or --layer
    pairs = check_bitext(bitext)
    steps = settings.steps or default_steps(pairs)
    out.mkdir(parents=True)
    console.rule(f"1) prepare {pairs:,} pairs with the start's tokenizer")
    write_parallel(bitext, out / "bitext", settings.src_lang, settings.tgt_lang)
    config = PrepareConfig(out=out / "prepared", tokenizer_from=start, progress=settings.progress)
    run_prepare(discover_corpus(None, out / "bitext"), config)
    shutil.rmtree(out / "bitext")  # the user's files are the source; the copy was for `prepare` only
    console.rule(f"2) self-train the start on the bitext: {steps} steps of {PAIRS_PER_STEP} pairs")
    console.print(f"({LOSS_NOTE})", highlight=False)
    recipe = load_recipe("self-align", self_align_overrides(out / "prepared", start, steps, settings.lr))
    summary = pretrain(recipe, out / "run", progress=settings.progress, device=settings.device)
    console.rule(f"3) towards the start (WiSE-FT, weight {settings.weight:g}), then align: {reading.describe()}")
    interpolate_folders(start, out / "run", settings.weight, out / "aligner")
    if settings.flags != ReadingFlags():  # the aligner's folder reads as it was read here
        write_reading(out / "aligner", replace(reading, chosen_by=f"fit-aligner, {reading.chosen_by}"))
    loaded = load_model(out / "aligner", device=settings.device)
    aligner = Aligner(loaded, batch_tokens=settings.batch_tokens, precision="bf16", **asdict(settings.flags))
    aligned_at = time.perf_counter()
    with atomic_text_file(out / "links.txt") as links:
        cut = align_bitext(aligner, bitext, pairs, links, progress=settings.progress)
    report_cut_pairs(cut, bitext.source, loaded.model.config.max_positions)
    report = {
        "start": str(start),
        "bitext": [str(p) for p in bitext.paths()],
        "tokenize": bitext.tokenize,
        "pairs": pairs,
        "steps": steps,
        "lr": settings.lr,
        "weight": settings.weight,
        "method": aligner.reading.method,
        "softmax_threshold": aligner.reading.softmax_threshold,
        "layer": aligner.reading.layer,
        "encoding": aligner.reading.encoding,
        "reading": aligner.reading.describe(),
        "protocol_version": PROTOCOL_VERSION,
        "train_minutes": summary["command_seconds"] / 60,
        "align_seconds": time.perf_counter() - aligned_at,
        "minutes": (time.perf_counter() - t0) / 60,
    }
    write_json(out / "fit.json", report)
    console.print(
        f"links: {out / 'links.txt'}; aligner: {out / 'aligner'}; {report['minutes']:.1f} min", highlight=False
    )
    return report
