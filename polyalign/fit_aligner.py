"""`polyalign fit-aligner`: a word aligner fitted to the user's own bitext, and its links, in one command.

1) check the bitext (two line-aligned files or one `source ||| target` file), the start model, the reading and
every setting before anything is written; 2) prepare the bitext as a parallel corpus with the start's tokenizer;
3) self-train the start on it (recipe `self-align`: awesome-align's objective, embeddings held) for one pass in
16-pair batches, at most the recipe's 1,000 steps, its schedule scaled to the steps; 4) pull the result back towards
the start (WiSE-FT, as `interpolate --weight`); 5) align the bitext with the reading `resolve_reading` gives for the
start's folder and the flags (recorded in the aligner's alignment.json) into OUT/links.txt. As eflomal does, the
links come from a model that has read the bitext it aligns.

OUT/fit-request.json, written before any work, records what was asked; `fit-aligner --resume OUT` reads it and does
what a signal or a kill left undone: each stage whose result is there (prepared/, a run at its last step, aligner/)
is kept, training goes on from its last checkpoint.
"""

from __future__ import annotations

import math
import shutil
import signal
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from polyalign.align.aligner import PROTOCOL_VERSION, Aligner
from polyalign.align.bitext import Bitext, check_bitext, read_bitext
from polyalign.align.reading import ReadingFlags, check_flags, model_depth, pass_on, resolve_reading, write_reading
from polyalign.align.write import align_bitext, report_cut_pairs
from polyalign.checkpoint import checkpoint_step, latest_checkpoint, load_model, resolve_model_folder
from polyalign.config import load_recipe
from polyalign.data.prepare import PrepareConfig, discover_corpus
from polyalign.data.prepare import prepare as run_prepare
from polyalign.io import (
    DataError,
    Stopped,
    Terminated,
    atomic_text_file,
    read_json,
    recover_atomic_leftovers,
    write_json,
)
from polyalign.model_folders import interpolate_folders
from polyalign.outputs import check_output, hold_output
from polyalign.tables import console
from polyalign.train import RECIPE_FILE, load_run_recipe, pretrain

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
REQUEST_FILE = "fit-request.json"
"""What the fit was asked to do, written before any work: `--resume OUT` goes on with the same start, bitext and
settings."""
REPORT_FILE = "fit.json"
"""Written last: its presence means the fit is complete."""
COMMAND = "polyalign fit-aligner"
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
    if out.exists():
        if (out / REQUEST_FILE).is_file() and not (out / REPORT_FILE).is_file():
            raise DataError(f"{out}: an interrupted fit is there; continue it with `{COMMAND} --resume {out}`")
        raise DataError(f"{out}: already exists; choose another --out (nothing was written)")
    inputs = {"--model": start, "--src/--tgt/--pairs": bitext.paths()}
    check_output(out, inputs)
    check_languages(settings.src_lang, settings.tgt_lang)
    folder = resolve_model_folder(start)  # a missing or wrong start is one line before anything is written
    reading = resolve_reading(folder, model_depth(folder), settings.flags)  # so is a bad reading or --layer
    pairs = check_bitext(bitext)
    settings = replace(settings, steps=settings.steps or default_steps(pairs))
    with hold_output(out, COMMAND, inputs):
        out.mkdir(parents=True)
        write_json(out / REQUEST_FILE, fit_request(start, bitext, pairs, settings))
        return run_stages(start, bitext, out, settings, reading, pairs)


def resume_fit(out: Path, device: str = "cpu", progress: bool = True) -> dict:
    """Go on with the fit in OUT as its fit-request.json asked, from where a signal or a kill stopped it."""
    start, bitext, pairs, settings = read_fit_request(out)
    settings = replace(settings, device=device, progress=progress)
    with hold_output(out, COMMAND):
        if (out / REPORT_FILE).is_file():
            console.print(
                f"note: {out} holds a complete fit ({REPORT_FILE}); nothing to resume", highlight=False, soft_wrap=True
            )
            return read_json(out / REPORT_FILE)
        for note in recover_atomic_leftovers(out):  # a stage killed while it renamed its folder into place
            console.print(f"note: {note}", highlight=False, soft_wrap=True)
        folder = resolve_model_folder(start)
        reading = resolve_reading(folder, model_depth(folder), settings.flags)
        if (found := check_bitext(bitext)) != pairs:
            raise DataError(f"{bitext.source}: {found:,} pairs where the fit started with {pairs:,}; start a new fit")
        return run_stages(start, bitext, out, settings, reading, pairs)


def run_stages(start: Path, bitext: Bitext, out: Path, settings: FitSettings, reading, pairs: int) -> dict:
    """Each stage whose result OUT lacks; a signal (or Ctrl-C) ends in one line naming `--resume OUT`."""
    t0 = time.perf_counter()
    try:
        return _stages(start, bitext, out, settings, reading, pairs, t0)
    except Stopped as err:
        raise Stopped(interrupted_line(out, err.exit_code), err.exit_code) from None
    except KeyboardInterrupt:
        raise Stopped(interrupted_line(out, 128 + signal.SIGINT), 128 + signal.SIGINT) from None
    except Terminated:
        raise Stopped(interrupted_line(out, 128 + signal.SIGTERM), 128 + signal.SIGTERM) from None


def interrupted_line(out: Path, code: int) -> str:
    """What a signal left in OUT, and the command that finishes the fit."""
    name = signal.Signals(code - 128).name if 128 < code < 128 + signal.NSIG else "interrupted"
    kept = latest_checkpoint(out / "run") if (out / "run").is_dir() else None
    trained = f"self-training kept at step {checkpoint_step(kept)}" if kept else "no self-training step kept yet"
    return f"{name}: {trained}; finish the fit with `{COMMAND} --resume {out}`"


def _stages(start, bitext, out, settings, reading, pairs, t0) -> dict:
    steps = settings.steps
    if not (out / "prepared").is_dir():
        console.rule(f"1) prepare {pairs:,} pairs with the start's tokenizer")
        shutil.rmtree(out / "bitext", ignore_errors=True)  # a copy an interrupted fit left
        write_parallel(bitext, out / "bitext", settings.src_lang, settings.tgt_lang)
        config = PrepareConfig(out=out / "prepared", tokenizer_from=start, progress=settings.progress)
        run_prepare(discover_corpus(None, out / "bitext"), config)
        shutil.rmtree(out / "bitext")  # the user's files are the source; the copy was for `prepare` only
    train_seconds = self_train(start, out, settings)
    console.rule(f"3) towards the start (WiSE-FT, weight {settings.weight:g}), then align: {reading.describe()}")
    if not (out / "aligner").is_dir():
        interpolate_folders(start, out / "run", settings.weight, out / "aligner")
    pass_on(resolve_model_folder(start), out / "aligner")  # again on a resume: a kill may have come between
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
        "train_minutes": train_seconds / 60,
        "align_seconds": time.perf_counter() - aligned_at,
        "minutes": (time.perf_counter() - t0) / 60,
    }
    write_json(out / REPORT_FILE, report)
    console.print(
        f"links: {out / 'links.txt'}; aligner: {out / 'aligner'}; {report['minutes']:.1f} min", highlight=False
    )
    return report


def self_train(start: Path, out: Path, settings: FitSettings) -> float:
    """Self-train into OUT/run: a new run, or the interrupted one from its last checkpoint; nothing when it reached
    its last step. The seconds this command trained."""
    run, steps = out / "run", settings.steps
    kept = latest_checkpoint(run) if (run / RECIPE_FILE).is_file() else None
    if kept is not None and checkpoint_step(kept) >= steps:
        return 0.0
    console.rule(f"2) self-train the start on the bitext: {steps} steps of {PAIRS_PER_STEP} pairs")
    console.print(f"({LOSS_NOTE})", highlight=False)
    if (run / RECIPE_FILE).is_file():
        recipe, resume = load_run_recipe(run), True
    else:  # none yet, or killed before it wrote its recipe: start it afresh
        shutil.rmtree(run, ignore_errors=True)
        recipe, resume = (
            load_recipe("self-align", self_align_overrides(out / "prepared", start, steps, settings.lr)),
            False,
        )
    summary = pretrain(recipe, run, resume=resume, progress=settings.progress, device=settings.device)
    return summary["command_seconds"]


# ---------------------------------------------------------------------------------------------------------
# The request: what `--resume OUT` goes on with


def fit_request(start: Path, bitext: Bitext, pairs: int, settings: FitSettings) -> dict:
    kept = {f.name: getattr(settings, f.name) for f in fields(settings) if f.name not in ("device", "progress")}
    return {
        "start": str(Path(start).absolute()),
        "source": str(bitext.source.absolute()),
        "target": None if bitext.target is None else str(bitext.target.absolute()),
        "tokenize": bitext.tokenize,
        "pairs": pairs,
        **kept,
        "flags": asdict(settings.flags),
    }


def read_fit_request(out: Path) -> tuple[Path, Bitext, int, FitSettings]:
    """OUT's request, checked: a folder without one (or with a damaged one) is one line."""
    path = out / REQUEST_FILE
    if not path.is_file():
        what = "does not exist" if not out.exists() else f"holds no {REQUEST_FILE}, so no fit to resume"
        raise DataError(f"{out}: {what}; --resume takes the --out of a `{COMMAND}` that was interrupted")
    request = read_json(path)
    try:
        flags = ReadingFlags(**request["flags"])
        if flags.layer is not None and type(flags.layer) is not int:
            raise TypeError(f"flags.layer {flags.layer!r}")
        settings = FitSettings(
            steps=int(request["steps"]), src_lang=str(request["src_lang"]), tgt_lang=str(request["tgt_lang"]),
            flags=flags, lr=float(request["lr"]), weight=float(request["weight"]),
            batch_tokens=int(request["batch_tokens"]),
        )  # fmt: skip
        target = None if request["target"] is None else Path(request["target"])
        bitext = Bitext(Path(request["source"]), target, bool(request["tokenize"]))
        start, pairs = Path(request["start"]), int(request["pairs"])
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as err:
        raise DataError(f"{path}: damaged ({type(err).__name__}: {err}); start a new fit") from None
    if (
        settings.steps < 1
        or pairs < 1
        or settings.batch_tokens < 1
        or not settings.lr > 0
        or not 0 <= settings.weight <= 1
    ):
        raise DataError(f"{path}: damaged (steps, pairs, batch_tokens, lr or weight out of range); start a new fit")
    check_languages(settings.src_lang, settings.tgt_lang)
    check_flags(settings.flags)
    return start, bitext, pairs, settings
