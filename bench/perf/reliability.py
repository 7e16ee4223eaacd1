"""Kill -9 a training run where it matters, then `--resume`: does every trial continue the same loss curve?

Writes bench/results/reliability.json and its page, reliability.md (`python -m bench.regenerate_check` draws it
again from the JSON). Each trial starts a tiny pre-training run on the bundled sample (a checkpoint every 2 steps,
so that writes are frequent) and kills it with SIGKILL at one of three moments, taken in turn so that any seed and
any run of 3 or more trials covers each:
  after-first-checkpoint  a few steps after the first checkpoint is complete;
  during-write            while a checkpoint is being written (its hidden `.step-*.tmp-*` folder exists), at a
                          random step once one complete checkpoint exists;
  late                    in the last quarter of the run.
It then resumes with `--resume` (with a fresh start only if no checkpoint was complete) and compares the finished
run's per-step losses with those of an uninterrupted reference run, exactly. A trial counts as resumed from a
checkpoint only when the resumed process says which one it loaded ("resuming from ... at step N"); a kill counts
as mid-write only when the half-written folder is still there after the process died.
`--distributed` runs the same tiny run in two processes under torchrun instead, stopped at a random step by kill -9
of one of its ranks or by SIGTERM to the launcher, in turn; it times how long the processes left took to stop,
keeps what they said and the exit codes, runs the command their line gives, and compares the curve with the
uninterrupted two-process run's (`--append` adds trials to those saved: the bench runs in pieces).
Heavy (a few CPU-minutes): run it under the shared CPU lock:
    flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.run reliability -- [--trials N]
    flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.run reliability -- --distributed --trials 10 [--append]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.page import save_page
from bench.perf.torchrun_processes import (
    LAUNCH,
    exit_codes,
    exited,
    polyalign_tracebacks,
    rank_processes,
    resume_command,
    said_lines,
)
from bench.reporting import Block, commit, machine, read_json, records
from polyalign.checkpoint import checkpoint_dirs

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
SAMPLE = ROOT / "polyalign" / "sample_data"
STEPS, SAVE_EVERY, KEEP = 40, 2, 2
RECIPE = f"""model: {{hidden_size: 64, num_layers: 2, num_heads: 2, ffn_size: 128, max_positions: 128,
        attention_dropout: 0.0, num_languages: auto}}
objectives:
  - name: mlm
  - name: tlm
data:
  mono: {{max_tokens: 1024, max_length: 62}}
  parallel: {{max_tokens: 1024, max_length: 30}}
trainer: {{max_steps: {STEPS}, lr: 1.0e-3, warmup_steps: 4, log_every: 1, save_every: {SAVE_EVERY},
          keep_checkpoints: {KEEP}}}
"""


def polyalign(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "polyalign.cli", *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def train(work: Path, run: Path, resume: bool = False) -> tuple[int, str]:
    args = ["pretrain", str(work / "recipe.yaml"), "--data", str(work / "prepared"), "--run-dir", str(run)]
    proc = polyalign(*args, *(["--resume"] if resume else []), "--no-progress")
    out, _ = proc.communicate()
    return proc.returncode, out


def losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in records(run / "metrics.jsonl")}


def prepare_work(work: Path) -> None:
    """The recipe and the bundled sample, prepared, in `work` (kept between the pieces of a bench)."""
    (work / "recipe.yaml").write_text(RECIPE)
    if (work / "prepared").is_dir():
        return
    sample = ["--mono", str(SAMPLE / "mono"), "--parallel", str(SAMPLE / "parallel"), "--vocab-size", "4000"]
    prep = polyalign("prepare", *sample, "--out", str(work / "prepared"), "--no-progress")
    if prep.wait() != 0:
        sys.exit(f"prepare failed: {prep.stdout.read()}")


CASES = ("after-first-checkpoint", "during-write", "late")
RESUMED = re.compile(r"resuming from .*step-(\d+) at step (\d+)")


def logged_steps(run: Path) -> int:
    path = run / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def wait_and_kill(proc: subprocess.Popen, run: Path, case: str, rng: random.Random, steps: int, every: int) -> None:
    """Kill `proc` at the trial's moment (see the module docstring); a run that ends first is not killed."""

    def wait(ready) -> bool:
        while proc.poll() is None and not ready():
            time.sleep(0.001)
        return proc.poll() is None

    if case == "after-first-checkpoint":
        at = every + rng.randint(0, 3)
        ready = wait(lambda: checkpoint_dirs(run) and logged_steps(run) >= at)
    elif case == "during-write":
        after = rng.randint(every, steps - 2 * every)
        ready = wait(lambda: checkpoint_dirs(run) and logged_steps(run) >= after)
        ready = ready and wait(lambda: any((run / "checkpoints").glob(".step-*")))
    else:
        at = rng.randint(steps * 3 // 4, steps - 1)
        ready = wait(lambda: logged_steps(run) >= at)
    if ready:
        proc.send_signal(signal.SIGKILL)


def trial(work: Path, index: int, reference: dict[int, float], rng: random.Random, steps: int, every: int) -> dict:
    run = work / f"trial-{index:02d}"
    shutil.rmtree(run, ignore_errors=True)
    case = CASES[index % len(CASES)]
    args = ["pretrain", str(work / "recipe.yaml"), "--data", str(work / "prepared"), "--run-dir", str(run)]
    proc = polyalign(*args, "--no-progress")
    wait_and_kill(proc, run, case, rng, steps, every)
    proc.communicate()
    finished_before_kill = proc.returncode == 0
    # After the process died: what a kill really left (a half-written folder) and what was complete
    half_written = sorted(p.name for p in (run / "checkpoints").glob(".step-*")) if run.is_dir() else []
    checkpoints = [p.name for p in checkpoint_dirs(run)]
    logged_at_kill = logged_steps(run)
    code, out = train(work, run, resume=True)
    notes = [line for line in out.splitlines() if line.startswith("note:") or "error" in line.lower()]
    loaded = RESUMED.search(out)
    fresh = False
    if code != 0 and not checkpoints:  # killed before its recipe was written: nothing to resume
        shutil.rmtree(run, ignore_errors=True)
        code, out = train(work, run)
        fresh = True
    got = losses(run) if code == 0 else {}
    equal = code == 0 and got == reference
    max_diff = max((abs(got[s] - reference[s]) for s in reference if s in got), default=float("nan"))
    return {
        "trial": index,
        "case": case,
        "finished_before_kill": finished_before_kill,
        "steps_logged_at_kill": logged_at_kill,
        "checkpoints_at_kill": checkpoints,
        "half_written_at_kill": half_written,
        "resumed_from_step": int(loaded[2]) if loaded else None,
        "resume_exit_code": code,
        "fresh_start": fresh,
        "notes": notes,
        "curve_equal": equal,
        "max_abs_loss_difference": max_diff,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work" / "reliability")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="the two-process trials (torchrun) instead; their results join the one-process ones in the JSON",
    )
    parser.add_argument("--append", action="store_true", help="with --distributed: add to the trials saved before")
    args = parser.parse_args()
    if args.distributed:
        distributed_main(args)
        return
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    prepare_work(work)
    start = time.perf_counter()
    code, out = train(work, work / "reference")
    duration = time.perf_counter() - start
    if code != 0:
        sys.exit(f"reference run failed:\n{out}")
    reference = losses(work / "reference")
    rng = random.Random(args.seed)
    trials = []
    for i in range(args.trials):
        trials.append(trial(work, i, reference, rng, STEPS, SAVE_EVERY))
        print(f"trial {i}: {trials[-1]}", flush=True)
    killed = [t for t in trials if not t["finished_before_kill"]]
    summary = {
        "trials": len(trials),
        **{f"case {case}": sum(t["case"] == case for t in trials) for case in CASES},
        "killed_while_running": len(killed),
        "killed_while_a_checkpoint_was_half_written": sum(bool(t["half_written_at_kill"]) for t in killed),
        "resumed_from_a_checkpoint (the resume said which)": sum(
            bool(t["resumed_from_step"]) and t["resume_exit_code"] == 0 for t in trials
        ),
        "resumed_at_the_newest_complete_checkpoint": sum(
            t["resumed_from_step"] is not None
            and bool(t["checkpoints_at_kill"])
            and t["checkpoints_at_kill"][-1] == f"step-{t['resumed_from_step']:07d}"
            for t in trials
        ),
        "restarted_from_step_0": sum(t["resumed_from_step"] is None and t["resume_exit_code"] == 0 for t in trials),
        "fresh_start_needed": sum(t["fresh_start"] for t in trials),
        "fell_back_to_previous_checkpoint": sum(any("damaged" in n for n in t["notes"]) for t in trials),
        "curve_equal": sum(t["curve_equal"] for t in trials),
        "needed_manual_fix": sum(t["resume_exit_code"] != 0 and not t["fresh_start"] for t in trials),
        "reference_seconds": round(duration, 1),
    }
    command = f"python -m bench.run reliability -- --trials {args.trials} --seed {args.seed}"
    run = {"steps": STEPS, "save_every": SAVE_EVERY, "keep_checkpoints": KEEP}
    saved = {"code": commit(), "machine": machine(), "command": command, "run": run, "summary": summary}
    before = RESULTS / "reliability.json"
    kept = (
        {"distributed": read_json(before)["distributed"]}
        if before.is_file() and "distributed" in read_json(before)
        else {}
    )
    saved |= {"trials": trials} | kept
    save_page(RESULTS / "reliability.json", saved, page_parts(saved))
    print(f"wrote {RESULTS / 'reliability.md'}: {summary}")


TRIAL_COLUMNS = (
    "trial",
    "kill moment",
    "steps logged at the kill",
    "complete checkpoints after the kill",
    "half-written after the kill",
    "resumed from step",
    "exit code",
    "same loss curve",
    "notes",
)


def trial_row(t: dict) -> list:
    resumed = t["resumed_from_step"] if t["resumed_from_step"] is not None else "step 0"
    return [
        t["trial"],
        t["case"],
        "no (it finished)" if t["finished_before_kill"] else t["steps_logged_at_kill"],
        ", ".join(t["checkpoints_at_kill"]) or "none",
        ", ".join(t["half_written_at_kill"]) or "-",
        "fresh start" if t["fresh_start"] else resumed,
        t["resume_exit_code"],
        "yes" if t["curve_equal"] else "NO",
        "; ".join(t["notes"]) or "",
    ]


def page_parts(saved: dict) -> list:
    """reliability.md from what the bench saved (bench/page.py draws it from the JSON's copy)."""
    run, summary = saved["run"], saved["summary"]
    protocol = (
        f"Generated by `{saved['command']}` at commit {saved['code']} ({saved['machine']}). A tiny run on the bundled "
        f"sample ({run['steps']} steps, a checkpoint every {run['save_every']} steps, keep {run['keep_checkpoints']}; "
        f"the uninterrupted run takes {summary['reference_seconds']:.1f} s, start-up included) is killed with SIGKILL "
        "at one of three moments in turn: a few steps after its first complete checkpoint, while a checkpoint is being "
        "written (once one is complete), or in the last quarter of the run; then continued with `polyalign pretrain "
        "--resume`. 'Resumed from step' is what the resumed process said it loaded; 'half-written' is what the kill "
        "left on disk. The finished run's per-step losses are compared exactly with the uninterrupted run's."
    )
    counts = Block(heading="Counts", header=("", "trials"), rows=tuple(summary.items()))
    trials = Block(heading="Trials", header=TRIAL_COLUMNS, rows=tuple(tuple(trial_row(t)) for t in saved["trials"]))
    parts = ["# Kill -9 and resume", "", protocol, "", counts, trials]
    if "distributed" in saved:
        parts += ["", *distributed_blocks(saved["distributed"])]
    return parts


# ---------------------------------------------------------------------------------------------------------
# Two processes under torchrun

PROCESS_TIMEOUT_S = 30
"""trainer.process_timeout_s of the two-process runs: the longest a survivor may wait in a collective."""
DISTRIBUTED_KINDS = ("kill -9 of a rank", "SIGTERM to the launcher")


def torchrun_train(work: Path, run: Path) -> subprocess.Popen:
    args = ["pretrain", str(work / "recipe.yaml"), "--data", str(work / "prepared"), "--run-dir", str(run)]
    sets = ["--set", f"trainer.process_timeout_s={PROCESS_TIMEOUT_S}", "--set", "trainer.loader_workers=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [*LAUNCH, "-m", "polyalign.cli", *args, *sets, "--no-progress"]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def distributed_trial(work: Path, index: int, reference: dict[int, float], rng: random.Random) -> dict:
    """Kill one rank (chosen at random) with -9, or send SIGTERM to torchrun, at a random step; time until every
    process left running has ended; then run the command the survivors' line gives and compare the curve."""
    run = work / f"ddp-{index:02d}"
    shutil.rmtree(run, ignore_errors=True)
    kind = DISTRIBUTED_KINDS[index % len(DISTRIBUTED_KINDS)]
    at = rng.randint(3, STEPS - 3)
    proc = torchrun_train(work, run)
    while proc.poll() is None and logged_steps(run) < at:
        time.sleep(0.005)
    ranks, logged_at = rank_processes(proc.pid), logged_steps(run)
    victim = rng.randint(0, 1) if kind.startswith("kill") else None
    started = time.perf_counter()
    if victim is not None:
        os.kill(ranks[victim], signal.SIGKILL)
    else:
        proc.send_signal(signal.SIGTERM)
    survivors = [pid for rank, pid in ranks.items() if rank != victim]
    while not all(exited(pid) for pid in survivors):
        time.sleep(0.002)
    stop_seconds = time.perf_counter() - started
    out, _ = proc.communicate()
    said = said_lines(out)
    checkpoints = [p.name for p in checkpoint_dirs(run)]
    go_on = next((line for line in said if "continue with `torchrun" in line), None)
    resumed = subprocess.run(
        resume_command(go_on) if go_on else [sys.executable, "-c", "raise SystemExit(3)"],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
    )
    loaded = RESUMED.search(resumed.stdout)
    got = losses(run) if resumed.returncode == 0 else {}
    return {
        "trial": index,
        "kind": kind,
        "killed_rank": victim,
        "steps_logged_at_the_fault": logged_at,
        "survivors_stopped_seconds": round(stop_seconds, 3),
        "launcher_exit_code": proc.returncode,
        "rank_exit_codes": {str(k): v for k, v in exit_codes(out).items()},
        "said": said,
        "traceback_lines": len(polyalign_tracebacks(out)),
        "checkpoints_after": checkpoints,
        "kept_named": re.search(r"kept: checkpoint (step-\d+)", go_on)[1] if go_on and "kept:" in go_on else None,
        "resumed_from_step": int(loaded[2]) if loaded else None,
        "resume_exit_code": resumed.returncode,
        "resume_lines": said_lines(resumed.stdout + resumed.stderr),
        "curve_equal": resumed.returncode == 0 and got == reference,
        "max_abs_loss_difference": max((abs(got[s] - reference[s]) for s in reference if s in got), default=None),
    }


def distributed_main(args) -> None:
    """The two-process trials, in pieces: `--append` adds `--trials` more to those saved (the seed moves on with
    them, so that pieces draw other steps)."""
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    prepare_work(work)
    saved_path = RESULTS / "reliability.json"
    saved = read_json(saved_path)
    before = saved.get("distributed", {}) if args.append else {}
    trials, commands = list(before.get("trials", [])), list(before.get("commands", []))
    reference_path = work / "ddp-reference"
    seconds = before.get("summary", {}).get("reference_seconds")
    if not (reference_path / "metrics.jsonl").is_file() or seconds is None:
        shutil.rmtree(reference_path, ignore_errors=True)
        started = time.perf_counter()
        out, _ = torchrun_train(work, reference_path).communicate()
        seconds = round(time.perf_counter() - started, 1)
        if len(said_lines(out)) != 1:
            sys.exit(f"reference run failed:\n{out}")
    reference = losses(reference_path)
    rng = random.Random(args.seed + len(trials))
    command = f"python -m bench.run reliability -- --distributed --trials {args.trials} --seed {args.seed}"
    commands.append(command + (" --append" if args.append else "") + f" (commit {commit()})")
    run = {"steps": STEPS, "save_every": SAVE_EVERY, "keep_checkpoints": KEEP, "processes": 2}
    run |= {"process_timeout_s": PROCESS_TIMEOUT_S, "loader_workers": 1}
    for _ in range(args.trials):  # saved after each trial: a piece cut short keeps what it did
        trials.append(distributed_trial(work, len(trials), reference, rng))
        print(f"trial {len(trials) - 1}: {trials[-1]}", flush=True)
        summary = distributed_summary(trials) | {"reference_seconds": seconds}
        section = {"code": commit(), "machine": machine(), "commands": commands, "run": run, "summary": summary}
        saved["distributed"] = section | {"trials": trials}
        save_page(saved_path, saved, page_parts(saved))
    print(f"wrote {RESULTS / 'reliability.md'}: {saved['distributed']['summary']}")


def distributed_summary(trials: list[dict]) -> dict:
    summary: dict = {"trials": len(trials)}
    for kind in DISTRIBUTED_KINDS:
        these = [t for t in trials if t["kind"] == kind]
        stops = sorted(t["survivors_stopped_seconds"] for t in these)
        summary |= {
            f"{kind}: trials": len(these),
            f"{kind}: resumed with the command the survivors gave": sum(t["resume_exit_code"] == 0 for t in these),
            f"{kind}: curve equal to the uninterrupted run": sum(t["curve_equal"] for t in these),
            f"{kind}: one line per survivor, no polyalign traceback": sum(
                t["traceback_lines"] == 0 and len(t["said"]) == 1 for t in these
            ),
            f"{kind}: survivors stopped within (s), median / max": (
                f"{stops[len(stops) // 2]:.2f} / {stops[-1]:.2f}" if stops else "-"
            ),
        }
    return summary


DISTRIBUTED_COLUMNS = (
    "trial",
    "fault",
    "steps logged at the fault",
    "survivors stopped in (s)",
    "exit codes (launcher; ranks)",
    "what the processes said",
    "checkpoints after",
    "resumed from step",
    "same loss curve",
)


def distributed_row(t: dict) -> list:
    fault = t["kind"] if t["killed_rank"] is None else f"kill -9 of rank {t['killed_rank']}"
    ranks = ", ".join(f"rank {k}: {v}" for k, v in sorted(t["rank_exit_codes"].items())) or "-"
    return [
        t["trial"],
        fault,
        t["steps_logged_at_the_fault"],
        f"{t['survivors_stopped_seconds']:.2f}",
        f"{t['launcher_exit_code']}; {ranks}",
        " / ".join(line.split("; kept:")[0].split("; continue")[0] for line in t["said"]),
        ", ".join(t["checkpoints_after"]) or "none",
        t["resumed_from_step"] if t["resumed_from_step"] is not None else f"failed ({t['resume_exit_code']})",
        "yes" if t["curve_equal"] else "NO",
    ]


def distributed_blocks(saved: dict) -> list:
    run, summary = saved["run"], saved["summary"]
    commands = "; ".join(f"`{c}`" for c in saved["commands"])
    protocol = (
        f"Generated in pieces by {commands} ({saved['machine']}). The same tiny run in two processes "
        f"(`torchrun --standalone --nproc_per_node 2`, gloo, trainer.process_timeout_s={run['process_timeout_s']}, "
        f"one loader worker each; the uninterrupted run takes {summary['reference_seconds']:.1f} s, start-up "
        "included) is stopped at a random step by one of two faults in turn: kill -9 of one rank (chosen at random), "
        "or SIGTERM to the launcher (torchrun forwards it to both ranks). 'Survivors stopped in' is the time from "
        "the fault until every process not killed had ended (at most the configured timeout is the promise). Then "
        "the command the survivors' line gives is run, and the finished run's per-step losses are compared exactly "
        "with the uninterrupted two-process run's."
    )
    counts = Block(heading="Counts", header=("", "trials"), rows=tuple(summary.items()), level=3)
    rows = tuple(tuple(distributed_row(t)) for t in saved["trials"])
    trials = Block(heading="Trials", header=DISTRIBUTED_COLUMNS, rows=rows, level=3)
    return ["## Two processes under torchrun", "", protocol, "", counts, trials]
