"""Step 8 of the GPU check: the word aligner at GPU scale. From the trimmed multilingual-e5-small that travels in
bench/perf/aligner_pack.py's pack (a compact E5S1 file, read by `polyalign import-e5 --source`), self-training
(fit-aligner's method: the recipe `self-align`, softmax labels, embeddings held) over the whole packed bitext, and
the same with XLM-Align's DWA beside it (bench/recipes/aligner-dwa.yaml: its MLM head trained first), their WiSE-FT
interpolations towards the start; AER on the 7 gold sets, dev and test halves as bench/results/e5.md reports them;
`polyalign align` on 20,000 pairs, pairs/s.

THE RULE, written before any run (the e5 study's, bench/results/e5.md, with passes over the pack for steps):
1. Layer: the start's layer (4 to 10) with the lowest mean argmax AER over the gold sets' dev halves; both arms
   self-train there and every candidate is scored there.
2. Passes: self-training's schedule spans PASSES (one) passes over the packed bitext, its warm-up and linear decay
   over exactly the steps it runs (no minutes guard cuts it: a call cut at its budget is finished by the next, from
   its last checkpoint), a checkpoint every 1/CHECKPOINTS of a pass. Each arm's best checkpoint by mean dev-half
   argmax AER is interpolated towards the start at 0.25, 0.5 and 0.75 (WiSE-FT). The offered aligner: among
   self-training's checkpoints and interpolations below the start on every dev half (argmax, the rule's layer),
   the lowest mean dev-half AER (none below everywhere: the lowest mean); the number of passes is that
   checkpoint's. DWA-beside sees the same number of pairs (the same schedule) and runs only when that fits the
   budget left at the card's measured rate; else it is recorded as not run. It is chosen the same way among its
   own candidates, reported beside.
3. Extraction: on each chosen model at the rule's layer, the method (argmax, itermax, ot, softmax at 1e-3, softmax
   at 0.1) with the lowest mean dev-half AER. Test halves and whole sets are reported, never used to choose.
The learning rate is the CPU pilot's (5e-5, 2e-5 or 1e-5 at this recipe, chosen by a rule written before it ran;
bench/results/aligner_pilot.md; the pilot's code at commit ee8e556).

THE PLAN for a loan of its own (device seconds, 900 in all): the machine's start ~40; call 1 (timeout_s 600, `python
-m bench.run gpu-check aligner --work /tmp/gaw`, the step's 565 s): unpacking, importing and the start's sweep ~30
(measured on an H200); self-training, one pass of the pack at 128 pairs a step (487,053 pairs: 3,806 steps), ~130 at
the H200's measured 1,800 steps a minute (eager); its 5 checkpoints' scores, 3 interpolations and the chosen model's
5 extractions within `Plan.reserve_s` (170); `align` ~10. DWA-beside at the same 3,806 steps needs ~360 at its
measured 640 a minute and 170 for its scores: more than the ~220 left, so on such a loan it is recorded as not run
(the step says the seconds it needed and had). A call cut at its budget is finished by the same command at once.

It resumes inside a loan: the start, the bitext, each run (`pretrain --resume`), each model's scores stay in the
step's --work folder, so a call cut at its budget is finished by the next call with the same --work. Results:
the step's parts (gpu_check.json) and aligner/result.json beside the logs. The dry run does all of it on the CPU
with a random 2 x 32 model on the bundled sample (tests/test_gpu_aligner.py), both arms run.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from bench import selection as S
from bench import selection_steps as H
from bench.perf.aligner_pack import BITEXT_FILE, DEFAULT_PACK, GOLD_DIR, PACK_JSON, START_FILE
from bench.perf.gpu.step import NO_CUDA, ROOT, SAMPLE, SHARED, Step, device_name, polyalign_cli, run_command
from bench.perf.gpu.step import sample_prepared as prepare_sample
from bench.study import Candidate, Derived, Protocol, Selection

ARMS = {"self-align": "self-align", "dwa-beside": str(ROOT / "bench" / "recipes" / "aligner-dwa.yaml")}
OFFERED_ARM = "self-align"  # the first arm: the selection offers its choice, the others' are reported beside
WISE_WEIGHTS = (0.25, 0.5, 0.75)
METHODS = ("argmax", "itermax", "ot", "softmax", "softmax-0.1")
PROTOCOL = Protocol(None, "separate", "argmax")
"""Argmax at the layer rule's layer only: every candidate is scored there (the rule's 1 and 2)."""


@dataclass(frozen=True)
class Plan:
    pairs_per_step: int
    tokens_per_step: int
    lr: float
    """The CPU pilot's choice among 5e-5, 2e-5 and 1e-5 by its rule written first (its code at commit ee8e556,
    bench/results/aligner_pilot.md)."""
    passes: float
    checkpoints_per_pass: int
    align_pairs: int
    rule_layers: tuple[int, ...]
    overrides: tuple[str, ...] = ()
    step_cap: int = 0
    """At most this many steps (0: as many as the passes take); the dry run's and the pilot's few."""
    reserve_s: float = 0.0
    """Seconds of the step's budget kept for what follows a training (its scores and interpolations, `align`)."""
    steps_per_minute: dict | None = None
    """Each arm's training steps a minute on the card last measured: whether an arm beside the offered one fits the
    budget left is read from it (None: every arm runs)."""
    warmup_share: float = 0.02
    """Warm-up steps as a share of the schedule (the recipe's 100 over a pass of ~4,700 steps at 128 pairs), so that
    a shorter schedule (the pilot's) warms up and decays over exactly the steps it runs."""

    def schedule(self, pairs: int) -> tuple[int, int, int, int]:
        """(steps a pass, the schedule's steps, steps between checkpoints, warm-up steps) over `pairs` pairs: the
        schedule spans the passes (or the cap) and every run makes all of it, a call cut at its budget resumed by
        the next, so the learning rate always decays to zero inside the run."""
        steps_per_pass = math.ceil(pairs / self.pairs_per_step)
        steps = max(2, round(self.passes * steps_per_pass))
        steps = min(steps, self.step_cap) if self.step_cap else steps
        every = max(1, min(steps_per_pass, steps) // self.checkpoints_per_pass)
        return steps_per_pass, steps, every, max(1, round(self.warmup_share * steps))


# Eager: an arm trains for a few minutes, and compiling a training step took about one (the MLM arm's warm-up at
# XLM-R-base size, bench/results/gpu). One pass of the pack at 128 pairs: 3,806 steps, at the H200's measured rates
# (1,640 self-training and 580 DWA-beside steps in 0.91 minutes each, bench/results/gpu/loan4.md) ~2.1 minutes of
# self-training, ~6 of DWA.
FULL = Plan(128, 16384, 5e-5, 1.0, 4, 20_000, tuple(range(4, 11)), ("trainer.compile=false",), reserve_s=170,
            steps_per_minute={"self-align": 1800, "dwa-beside": 640})  # fmt: skip
DRY = Plan(8, 1024, 5e-5, 1.0, 2, 200, (1, 2),
           ("trainer.loader_workers=0", "trainer.head_warmup_steps=2", "data.mono.max_tokens=1024"), 6)  # fmt: skip


@dataclass
class Inputs:
    start: Path
    prepared: Path
    gold: Path
    gold_sets: tuple[str, ...]
    pairs: int
    described: dict


def selection(plan: Plan, inputs: Inputs, work: Path) -> Selection:
    """The rule above as a selection (bench/selection.py), run by the selection's own steps: both arms self-train at
    the layer rule's layer for the plan's schedule, each chosen among its own checkpoints and its best checkpoint's
    WiSE-FT interpolations; the arm beside the offered one only when its schedule fits at the card's rate."""
    _, steps, every, warmup = plan.schedule(inputs.pairs)
    sets = ("trainer.stop_at=0", "trainer.max_minutes=0", f"trainer.warmup_steps={warmup}", f"trainer.lr={plan.lr:g}",
            f"data.parallel.max_examples={plan.pairs_per_step}", f"data.parallel.max_tokens={plan.tokens_per_step}",
            *plan.overrides)  # fmt: skip
    rates = {} if plan.steps_per_minute is None else plan.steps_per_minute
    arms = tuple(Candidate(name, recipe, sets, init_from=str(inputs.start), rule_layer=True,
                           steps_per_minute=0 if name == OFFERED_ARM else rates.get(name, 0))
                 for name, recipe in ARMS.items())  # fmt: skip
    return Selection(str(inputs.start), str(inputs.prepared), str(work / "aligner" / "runs"), str(inputs.gold),
                     inputs.gold_sets, PROTOCOL, arms, steps, every, rule_layers=plan.rule_layers, device="cuda",
                     derived=tuple(Derived(w, base=arm) for arm in ARMS for w in WISE_WEIGHTS),
                     each_arm=True, reserve_s=plan.reserve_s)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# Inputs: the pack on the GPU, the bundled sample in the dry run


def unpack(step: Step) -> Inputs | None:
    """The start as a model folder and the bitext as a prepared folder, made once in the work folder."""
    base = step.work / "aligner"
    if step.dry_run:
        prepared = prepare_sample(step)
        start = base / "start"
        if not (start / "config.json").is_file():
            tiny_start(prepared, start)
        gold = SAMPLE / "word_alignment"
        meta = json.loads((prepared / "meta.json").read_text())
        pairs = sum(p["lines"] for p in meta["parallel"].values())
        return Inputs(start, prepared, gold, tuple(sorted(p.name for p in gold.iterdir())), pairs, {"dry_run": True})
    if not (DEFAULT_PACK / PACK_JSON).is_file():
        step.part("pack", status="skipped: no pack (python -m bench.run aligner-pack; carry bench/work/aligner-pack)")
        return None
    described = json.loads((DEFAULT_PACK / PACK_JSON).read_text())
    if not (base / "prepared" / "meta.json").is_file():
        shutil.rmtree(base / "unpacking", ignore_errors=True)
        with tarfile.open(DEFAULT_PACK / BITEXT_FILE) as tar:
            try:
                tar.extractall(base / "unpacking", filter="data")  # regular files only, inside the folder
            except TypeError:  # a Python before the filters (3.11.3 and older): our own archive, trusted
                tar.extractall(base / "unpacking")
        (base / "unpacking" / "prepared").rename(base / "prepared")
    start = base / "start"
    if not (start / "config.json").is_file():
        command = polyalign_cli("import-e5", "--source", str(DEFAULT_PACK / START_FILE), "--out", str(start))
        status, _ = run_command(step, "import-e5", command + ["--overwrite"])
        if status != "ok":
            step.part("pack", status=status)
            return None
    gold_sets = tuple(described["gold_sets"])
    return Inputs(start, base / "prepared", DEFAULT_PACK / GOLD_DIR, gold_sets, described["total_pairs"], described)


def tiny_start(prepared: Path, out: Path) -> None:
    """The dry run's start: a random 2 x 32 model with the sample's tokenizer, no language embeddings."""
    import torch

    from polyalign.checkpoint import save_model_folder
    from polyalign.data.prepared import PreparedData
    from polyalign.model import EncoderConfig, MaskedLanguageModel

    tokenizer = PreparedData(prepared).tokenizer()
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=tokenizer.special.vocab_size, hidden_size=32, num_layers=2, num_heads=2,
                           ffn_size=64, max_positions=128, pad_token_id=tokenizer.special.pad)  # fmt: skip
    save_model_folder(out, MaskedLanguageModel(config), tokenizer, [], overwrite=True)


# ---------------------------------------------------------------------------------------------------------
# The step: the selection's steps start, arms and derive, then each arm's extraction and `align`


def step_aligner(step: Step) -> None:
    import torch

    if not step.dry_run and not torch.cuda.is_available():
        step.part("pack", status=NO_CUDA)
        return
    plan = DRY if step.dry_run else FULL
    inputs = unpack(step)
    if inputs is None:
        return
    step.part("pack", status="ok", pairs=inputs.pairs, **{k: inputs.described.get(k) for k in ("fraction", "tokens")})
    declared = selection(plan, inputs, step.work)
    copy = step.logs.parent / "aligner" / "result.json"  # comes back with the record
    run = H.Run(declared, step.work / "aligner" / "result.json", step, "the GPU aligner", copies=(copy,))
    command = "python -m bench.run gpu-check aligner" + (" --dry-run" if step.dry_run else "")
    run.results |= {"command": command, "pack": inputs.described, "gold_sets": list(inputs.gold_sets)}
    H.start(run)
    sweep, layer = run.results["start_layers_dev"], int(S.rule_layer(declared, run.results))
    step.part("layer rule", status="ok", layer=layer,
              dev_mean_by_layer={k: round(S.mean(v, inputs.gold_sets), 2) for k, v in sweep.items()})  # fmt: skip
    run.results["rule_layer"] = layer
    steps_per_pass = plan.schedule(inputs.pairs)[0]
    for arm in ARMS:  # the offered arm's candidates, choice and extraction before the next arm's training starts
        run.only = [arm]
        H.arms(run)
        if "checkpoints" not in (record := run.results["arms"][arm]):  # not run: it did not fit the budget left
            continue
        last = int(S.last_step(record))  # the plan's passes, in pairs seen
        step.part(f"train {arm}", lr=plan.lr, steps_per_pass=steps_per_pass, passes=round(last / steps_per_pass, 3),
                  pairs_seen=last * plan.pairs_per_step)  # fmt: skip
        H.derive(run)
        offer(run, arm, layer)
    offered = run.results["offered"][OFFERED_ARM]
    run.results["align"] = align_speed(step, Path(offered["model"]), offered["method"], layer, plan.align_pairs)
    run.save()


def offer(run: H.Run, arm: str, layer: int) -> None:
    """The rule's 3 for one arm: every method measured on the start and on the arm's chosen model at the rule's layer,
    the lowest mean dev-half AER offered (bench/selection.py `chosen_method`); recorded under `offered`."""
    pick = S.chosen_at(run.selection, run.results, arm=arm)
    chosen, start = run.results["arms"][pick[0]]["checkpoints"][pick[1]], run.results["start"]["scores"]
    for scores, folder in ((start, run.path(run.selection.start)), (chosen, run.folder(*pick[:2]))):
        H.measure(run, scores, folder, (layer,), METHODS)
    method = S.chosen_method(run.selection, run.results, pick)
    model = run.folder(*pick[:2])
    run.results.setdefault("offered", {})[arm] = {"arm": pick[0], "step": pick[1], "method": method, "model": model}
    run.save()
    run.ctx.part(f"chosen {arm}", status="ok", model=f"{pick[0]}@{pick[1]}", method=method,
                 **aer_rows(chosen, start, method, layer, run.selection.gold_sets))  # fmt: skip


def aer_rows(chosen: dict, start: dict, method: str, layer: int, gold_sets) -> dict:
    """The chosen model's and the start's AER per gold set, whole / dev / test, at the chosen extraction."""

    def row(saved: dict, half: str) -> dict:
        key = f"separate/{method}" + ("" if half == "all" else f"/{half}")
        return {g: saved[key][str(layer)][g] for g in gold_sets}

    return {f"{who} {half}": row(saved, half) for who, saved in (("model", chosen), ("start", start))
            for half in ("all", S.DEV, S.TEST)}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# `polyalign align` with the offered aligner


def align_speed(step: Step, model: Path, method: str, layer: int, pairs: int) -> dict:
    """`polyalign align` with the offered aligner and reading on `pairs` sentence pairs: pairs/s of the command,
    start-up included (none for a command that did not finish)."""
    src, tgt, origin = write_pairs(step.work / "aligner" / "pairs", pairs)
    name, threshold = S.extraction(method)
    args = ["align", "--model", str(model), "--src", str(src), "--tgt", str(tgt), "--method", name]
    args += ["--layer", str(layer), "--device", device_name(step), "--no-progress"]
    args += ["--softmax-threshold", str(threshold)] if threshold is not None else []
    status, seconds = run_command(step, "align", polyalign_cli(*args), stdout=step.work / "aligner" / "links")
    record = {"status": status, "pairs": pairs, "from": origin, "seconds": seconds}
    record |= {"pairs_per_s": pairs / seconds} if status == "ok" else {}
    step.part("polyalign align", **record)
    return record


def write_pairs(folder: Path, n: int) -> tuple[Path, Path, str]:
    """n sentence pairs (en-de, en-es, en-fr, en-ru in turn, repeated as needed) from ../shared/data/train when
    it is here, else from the bundled sample; words are the text split at spaces."""
    shared = SHARED / "data" / "train" / "parallel"
    langs = ("de", "es", "fr", "ru")
    if all((shared / f"en-{x}.{x}.gz").is_file() for x in langs):
        origin, read = shared, lambda p: gzip.open(f"{p}.gz", "rt", encoding="utf-8")
    else:
        origin, read = SAMPLE / "parallel", lambda p: open(p, encoding="utf-8")
    per_language = []
    for x in langs:
        with read(origin / f"en-{x}.{x}") as fx, read(origin / f"en-{x}.en") as fe:
            per_language.append(
                [(a.strip(), b.strip()) for a, b in itertools.islice(zip(fx, fe, strict=True), n // len(langs))]
            )
    interleaved = [p for group in itertools.zip_longest(*per_language) for p in group if p and p[0] and p[1]]
    pairs = list(itertools.islice(itertools.cycle(interleaved), n))
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = folder / "src.txt", folder / "tgt.txt"
    src.write_text("".join(a + "\n" for a, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(b + "\n" for _, b in pairs), encoding="utf-8")
    shown = os.path.relpath(origin, ROOT) if origin.is_relative_to(ROOT.parent) else str(origin)
    return src, tgt, shown  # as a person at the repository root would type it
