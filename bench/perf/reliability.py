"""Kill -9 at random moments of a training run, then `--resume`: does every trial continue the same loss curve?

Writes bench/results/reliability.md and reliability.json. Each trial starts a tiny pre-training run on the bundled
sample (checkpoint every 2 steps, so that many kills land while a checkpoint is being written), kills it with
SIGKILL at a uniformly random moment of its expected duration, resumes it with `--resume` (once more if the kill
came before the first checkpoint: then a fresh start is the only option and the trial says so), and compares the
per-step losses of the finished run with those of an uninterrupted reference run, exactly.
Heavy (a few CPU-minutes): run it under the shared CPU lock:
    flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.perf.reliability
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.reporting import commit, machine, markdown_table, records, write_json
from polyalign.checkpoint import checkpoint_dirs

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
SAMPLE = ROOT / "polyalign" / "sample_data"
RECIPE = """model: {hidden_size: 64, num_layers: 2, num_heads: 2, ffn_size: 128, max_positions: 128,
        attention_dropout: 0.0, num_languages: auto}
objectives:
  - name: mlm
  - name: tlm
data:
  mono: {max_tokens: 1024, max_length: 62}
  parallel: {max_tokens: 1024, max_length: 30}
trainer: {max_steps: 40, lr: 1.0e-3, warmup_steps: 4, log_every: 1, save_every: 2, keep_checkpoints: 2}
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


def trial(work: Path, index: int, duration: float, reference: dict[int, float], rng: random.Random) -> dict:
    run = work / f"trial-{index:02d}"
    shutil.rmtree(run, ignore_errors=True)
    delay = rng.uniform(0.5, duration)
    # Odd trials aim at a checkpoint being written: kill as soon as a half-written `.step-*.tmp-*` folder is
    # seen after the random moment (else at the end of the run's expected duration).
    during_write = index % 2 == 1
    args = ["pretrain", str(work / "recipe.yaml"), "--data", str(work / "prepared"), "--run-dir", str(run)]
    proc = polyalign(*args, "--no-progress")
    time.sleep(delay / 2 if during_write else delay)
    if during_write:
        deadline = time.monotonic() + duration
        while proc.poll() is None and time.monotonic() < deadline and not any((run / "checkpoints").glob(".step-*")):
            time.sleep(0.001)
    finished_before_kill = proc.poll() is not None
    half_written = sorted(p.name for p in (run / "checkpoints").glob(".step-*")) if run.is_dir() else []
    if not finished_before_kill:
        proc.send_signal(signal.SIGKILL)
    proc.communicate()
    checkpoints = [p.name for p in checkpoint_dirs(run)]  # complete ones; a half-written one is a hidden .tmp
    code, out = train(work, run, resume=True)
    notes = [line for line in out.splitlines() if line.startswith("note:") or "error" in line.lower()]
    fresh = False
    if code != 0 and not checkpoints:  # killed before the first checkpoint: nothing to resume
        shutil.rmtree(run, ignore_errors=True)
        code, out = train(work, run)
        fresh = True
    got = losses(run) if code == 0 else {}
    equal = code == 0 and got == reference
    max_diff = max((abs(got[s] - reference[s]) for s in reference if s in got), default=float("nan"))
    return {
        "trial": index,
        "kill_after_s": round(delay, 2),
        "finished_before_kill": finished_before_kill,
        "checkpoints_at_kill": checkpoints,
        "aimed_at_a_checkpoint_write": during_write,
        "half_written_at_kill": half_written,
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
    args = parser.parse_args()
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "recipe.yaml").write_text(RECIPE)
    prep = polyalign(
        "prepare",
        "--mono",
        str(SAMPLE / "mono"),
        "--parallel",
        str(SAMPLE / "parallel"),
        "--vocab-size",
        "4000",
        "--out",
        str(work / "prepared"),
        "--no-progress",
    )
    if prep.wait() != 0:
        sys.exit(f"prepare failed: {prep.stdout.read()}")
    start = time.perf_counter()
    code, out = train(work, work / "reference")
    duration = time.perf_counter() - start
    if code != 0:
        sys.exit(f"reference run failed:\n{out}")
    reference = losses(work / "reference")
    rng = random.Random(args.seed)
    trials = []
    for i in range(args.trials):
        trials.append(trial(work, i, duration, reference, rng))
        print(f"trial {i}: {trials[-1]}", flush=True)
    summary = {
        "trials": len(trials),
        "killed_while_running": sum(not t["finished_before_kill"] for t in trials),
        "killed_while_a_checkpoint_was_half_written": sum(bool(t["half_written_at_kill"]) for t in trials),
        "resumed_from_a_checkpoint": sum(not t["fresh_start"] and t["resume_exit_code"] == 0 for t in trials),
        "fresh_start_needed": sum(t["fresh_start"] for t in trials),
        "fell_back_to_previous_checkpoint": sum(any("damaged" in n for n in t["notes"]) for t in trials),
        "curve_equal": sum(t["curve_equal"] for t in trials),
        "needed_manual_fix": sum(t["resume_exit_code"] != 0 for t in trials),
        "reference_seconds": round(duration, 1),
    }
    code = commit()
    write_json(RESULTS / "reliability.json", {"code": code, "machine": machine(), "summary": summary, "trials": trials})
    rows = [
        [
            t["trial"],
            t["kill_after_s"],
            ", ".join(t["checkpoints_at_kill"]) or "none",
            ", ".join(t["half_written_at_kill"]) or "-",
            "fresh start" if t["fresh_start"] else "resume",
            t["resume_exit_code"],
            "yes" if t["curve_equal"] else "NO",
            "; ".join(t["notes"]) or "",
        ]
        for t in trials
    ]
    page = (
        "\n\n".join(
            [
                "# Kill -9 and resume",
                f"Generated by `python -m bench.perf.reliability` at commit {code} ({machine()}). A tiny run on the "
                "bundled sample (40 steps, a "
                f"checkpoint every 2 steps, keep 2; the uninterrupted run takes {duration:.1f} s, start-up included) "
                "is killed with SIGKILL at a uniformly random moment (odd trials: at the first half-written "
                "checkpoint after half that moment), then continued with "
                "`polyalign pretrain --resume`; the finished run's per-step losses are compared exactly "
                "with the uninterrupted run's.",
                "## Counts\n\n" + markdown_table(["", "trials"], [[k, v] for k, v in summary.items()]),
                "## Trials\n\n"
                + markdown_table(
                    [
                        "trial",
                        "kill after (s)",
                        "checkpoints at the kill",
                        "half-written at the kill",
                        "then",
                        "exit code",
                        "same loss curve",
                        "notes",
                    ],
                    rows,
                ),
            ]
        )
        + "\n"
    )
    (RESULTS / "reliability.md").write_text(page, encoding="utf-8")
    print(f"wrote {RESULTS / 'reliability.md'}: {summary}")


if __name__ == "__main__":
    main()
