"""Step 8 of the GPU check: the word aligner at GPU scale. From the trimmed multilingual-e5-small that travels in
bench/perf/aligner_pack.py's pack (a compact E5S1 file, read by `polyalign import-e5 --source`), self-training
(fit-aligner's method: the recipe `self-align`, softmax labels, embeddings held) over the whole packed bitext, and
the same with XLM-Align's DWA beside it (bench/recipes/aligner-dwa.yaml: its MLM head trained first), their WiSE-FT
interpolations towards the start; AER on the 7 gold sets, dev and test halves as bench/results/e5.md reports them;
`polyalign align` on 20,000 pairs, pairs/s.

THE RULE, written before any run (bench/studies/e5.py's, with passes over the pack for steps):
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

import json
import math
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from bench import selection as S
from bench.perf.aligner_pack import BITEXT_FILE, DEFAULT_PACK, GOLD_DIR, PACK_JSON, START_FILE
from bench.perf.gpu.alignment import rate, write_pairs
from bench.perf.gpu.step import NO_CUDA, ROOT, SAMPLE, UNFINISHED, Step, device_name, polyalign_cli, run_command
from bench.perf.gpu.step import sample_prepared as prepare_sample

ARMS = {"self-align": "self-align", "dwa-beside": str(ROOT / "bench" / "recipes" / "aligner-dwa.yaml")}
OFFERED_ARM = "self-align"
WISE_WEIGHTS = (0.25, 0.5, 0.75)
METHODS = ("argmax", "itermax", "ot", "softmax", "softmax-0.1")


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
    """Each arm's training steps a minute on the card last measured: whether an arm's schedule fits the budget left
    is read from it (None: every arm runs)."""
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

    def seconds_needed(self, arm: str, steps: int) -> float:
        """An arm's training seconds at the card's measured rate, and what follows it (0 without a rate)."""
        return 60 * steps / self.steps_per_minute[arm] + self.reserve_s if self.steps_per_minute else 0.0


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
# Scores, kept per model in the work folder


def scores(step: Step, inputs: Inputs, name: str, folder: Path, methods, layers) -> dict:
    """A model's AER by method, half, layer and gold set (bench/selection_run.py's layout); computed once."""
    from bench.selection_run import gold_scores
    from polyalign.checkpoint import load_model

    file = step.work / "aligner" / "scores" / f"{name}.json"
    saved = json.loads(file.read_text()) if file.is_file() else {}
    wanted = [(m, layer) for m in methods for layer in layers if str(layer) not in saved.get(f"separate/{m}", {})]
    if wanted:
        loaded = load_model(folder, device=device_name(step))
        new = gold_scores(loaded, inputs.gold, inputs.gold_sets, sorted({m for m, _ in wanted}),
                          sorted({layer for _, layer in wanted}))  # fmt: skip
        for key, by_layer in new.items():
            saved.setdefault(key, {}).update(by_layer)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(saved, indent=1) + "\n")
    return saved


def dev_aer(saved: dict, method: str, layer: int) -> dict[str, float]:
    return saved[f"separate/{method}/{S.DEV}"][str(layer)]


# ---------------------------------------------------------------------------------------------------------
# Training


def train(step: Step, inputs: Inputs, arm: str, layer: int, plan: Plan, run_dir: Path) -> tuple[Path, dict]:
    """One arm's run over the packed bitext, all of its schedule (resumed when its run folder has checkpoints: a call
    cut at its budget is finished by the next); its record."""
    from polyalign.checkpoint import checkpoint_dirs, checkpoint_step

    steps_per_pass, max_steps, save_every, warmup = plan.schedule(inputs.pairs)
    sets = [f"trainer.max_steps={max_steps}", f"trainer.save_every={save_every}", "trainer.keep_checkpoints=0",
            "trainer.stop_at=0", "trainer.max_minutes=0", f"trainer.warmup_steps={warmup}", f"trainer.lr={plan.lr:g}",
            f"data.parallel.max_examples={plan.pairs_per_step}", f"data.parallel.max_tokens={plan.tokens_per_step}",
            f"objectives.0.config.layer={layer}", *plan.overrides]  # fmt: skip
    done = run_dir / "done"
    finished_before = done.is_file()  # by an earlier call with this work folder
    if not finished_before:
        if not checkpoint_dirs(run_dir):  # cut before its first checkpoint: start it again
            shutil.rmtree(run_dir, ignore_errors=True)
        command = polyalign_cli("pretrain", ARMS[arm], "--data", str(inputs.prepared), "--init-from", str(inputs.start))
        command += ["--run-dir", str(run_dir), "--no-progress", *(a for s in sets for a in ("--set", s))]
        command += ["--resume"] if (run_dir / "checkpoints").is_dir() else []
        step.part(f"train {arm}", status=UNFINISHED)
        status, seconds = run_command(step, f"train-{run_dir.name}", command)
        if status != "ok":
            step.part(f"train {arm}", status=status, seconds=seconds)
            raise RuntimeError(f"train {arm}: {status}")
        done.write_text(json.dumps({"seconds": seconds}))
    steps = [checkpoint_step(c) for c in checkpoint_dirs(run_dir)]
    record = {"steps": max(steps), "max_steps": max_steps, "warmup_steps": warmup, "lr": plan.lr,
              "steps_per_pass": steps_per_pass, "passes": round(max(steps) / steps_per_pass, 3),
              "pairs_seen": max(steps) * plan.pairs_per_step, "seconds": json.loads(done.read_text())["seconds"],
              "finished_before": finished_before}  # fmt: skip
    step.part(f"train {arm}", status="ok", **record)
    return run_dir, record


def candidates(step: Step, inputs: Inputs, arm: str, run_dir: Path, layer: int) -> dict[str, tuple[Path, dict]]:
    """Every checkpoint of the arm and the WiSE-FT interpolations of its best one, with their scores."""
    from polyalign.checkpoint import checkpoint_dirs, checkpoint_step

    found = {}
    for folder in checkpoint_dirs(run_dir):
        name = f"{arm}@{checkpoint_step(folder)}"
        found[name] = (folder, scores(step, inputs, name, folder, ("argmax",), (layer,)))
    best = min(found, key=lambda n: S.mean(dev_aer(found[n][1], "argmax", layer), inputs.gold_sets))
    for weight in WISE_WEIGHTS:
        name, out = f"{best}-wise-{weight:g}", step.work / "aligner" / "wise" / f"{best}-wise-{weight:g}"
        if not (out / "config.json").is_file():
            args = ["interpolate", "--start", str(inputs.start), "--tuned", str(found[best][0])]
            status, _ = run_command(step, f"wise-{arm}-{weight:g}", polyalign_cli(
                *args, "--weight", str(weight), "--out", str(out), "--overwrite"))  # fmt: skip
            if status != "ok":
                raise RuntimeError(f"interpolate {best} at {weight}: {status}")
        found[name] = (out, scores(step, inputs, name, out, ("argmax",), (layer,)))
    return found


def choose(inputs: Inputs, found: dict, start: dict, layer: int) -> str:
    """The rule's (2): below the start on every dev half, the lowest mean dev-half argmax AER."""
    scored = {(n,): dev_aer(s, "argmax", layer) for n, (_, s) in found.items()}
    return S.choose(scored, dev_aer(start, "argmax", layer), inputs.gold_sets)[0]


# ---------------------------------------------------------------------------------------------------------
# The step


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
    start = scores(step, inputs, "start", inputs.start, ("argmax",), plan.rule_layers)
    layer = min(plan.rule_layers, key=lambda i: S.mean(dev_aer(start, "argmax", i), inputs.gold_sets))
    step.part("layer rule", status="ok", layer=layer,
              dev_mean_by_layer={i: round(S.mean(dev_aer(start, "argmax", i), inputs.gold_sets), 2)
                                 for i in plan.rule_layers})  # fmt: skip
    result = {"rule_layer": layer, "gold_sets": list(inputs.gold_sets), "pack": inputs.described, "arms": {}}
    start = scores(step, inputs, "start", inputs.start, METHODS, (layer,))
    result["start"] = start
    for arm in ARMS:
        run_dir = step.work / "aligner" / "runs" / arm
        if arm != OFFERED_ARM and (reason := unaffordable(step, plan, arm, inputs.pairs, run_dir)):
            step.part(f"train {arm}", status=f"skipped: not run, {reason}")
            result["arms"][arm] = {"not_run": reason}
            save(step, result)
            continue
        run_dir, trained = train(step, inputs, arm, layer, plan, run_dir)
        found = candidates(step, inputs, arm, run_dir, layer)
        chosen = choose(inputs, found, start, layer)
        chosen_scores = scores(step, inputs, chosen, found[chosen][0], METHODS, (layer,))
        method = min(METHODS, key=lambda m: S.mean(dev_aer(chosen_scores, m, layer), inputs.gold_sets))
        result["arms"][arm] = {
            "training": trained,
            "candidates_dev": {n: dev_aer(s, "argmax", layer) for n, (_, s) in found.items()},
            "chosen": chosen, "method": method, "model": str(found[chosen][0]), "scores": chosen_scores,
        }  # fmt: skip
        step.part(f"chosen {arm}", status="ok", model=chosen, method=method,
                  **aer_rows(chosen_scores, start, method, layer, inputs.gold_sets))  # fmt: skip
        save(step, result)
    offered = result["arms"][OFFERED_ARM]
    result["align"] = align_speed(step, Path(offered["model"]), offered["method"], layer, plan.align_pairs)
    save(step, result)


def unaffordable(step: Step, plan: Plan, arm: str, pairs: int, run_dir: Path) -> str | None:
    """Why an arm beside the offered one is not run in this call (None: it runs): it sees as many pairs as the
    offered arm (the same schedule), so it runs only when that schedule and its scores fit the budget left at the
    card's measured rate, or when an earlier call started it."""
    if (run_dir / "checkpoints").is_dir():
        return None
    steps = plan.schedule(pairs)[1]
    needed, left = plan.seconds_needed(arm, steps), step.left()
    if needed <= left:
        return None
    rate = plan.steps_per_minute[arm]
    return f"{steps:,} steps at {rate:,} a minute and their scores need {needed:.0f} s, {left:.0f} s left"


def aer_rows(chosen: dict, start: dict, method: str, layer: int, gold_sets) -> dict:
    """The chosen model's and the start's AER per gold set, whole / dev / test, at the chosen extraction."""

    def row(saved: dict, half: str) -> dict:
        key = f"separate/{method}" + ("" if half == "all" else f"/{half}")
        return {g: saved[key][str(layer)][g] for g in gold_sets}

    return {f"{who} {half}": row(saved, half) for who, saved in (("model", chosen), ("start", start))
            for half in ("all", S.DEV, S.TEST)}  # fmt: skip


def align_speed(step: Step, model: Path, method: str, layer: int, pairs: int) -> dict:
    """`polyalign align` with the offered aligner and reading on `pairs` sentence pairs: pairs/s of the command."""
    src, tgt, origin = write_pairs(step.work / "aligner" / "pairs", pairs)
    name, threshold = S.extraction(method)
    args = ["align", "--model", str(model), "--src", str(src), "--tgt", str(tgt), "--method", name]
    args += ["--layer", str(layer), "--device", device_name(step), "--no-progress"]
    args += ["--softmax-threshold", str(threshold)] if threshold is not None else []
    status, seconds = run_command(step, "align", polyalign_cli(*args), stdout=step.work / "aligner" / "links")
    record = {"status": status, "pairs": pairs, "from": origin, "seconds": seconds, **rate(status, pairs, seconds)}
    step.part("polyalign align", **record)
    return record


def save(step: Step, result: dict) -> None:
    out = step.logs.parent / "aligner"
    out.mkdir(parents=True, exist_ok=True)
    result["command"] = "python -m bench.run gpu-check aligner" + (" --dry-run" if step.dry_run else "")
    (out / "result.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
