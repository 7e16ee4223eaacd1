"""Kill -9 a training run where it matters, then `--resume`: does every trial continue the same loss curve?

Writes bench/results/reliability.json and its page, reliability.md (`python -m bench.page reliability` draws it
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
Heavy (a few CPU-minutes): run it under the shared CPU lock:
    flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.perf.reliability
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.reporting import Block, commit, machine, page_text, records, write_json
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


# ---------------------------------------------------------------------------------------------------------
# Runs under torchrun: its processes, what its summary says, what the ranks said (tests/test_rank_failures.py
# uses these too)

LAUNCH = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
"""torchrun, two processes on this machine (--standalone picks a free rendezvous port)."""


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc: Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # ended meanwhile
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return sorted(found)


def rank_processes(launcher: int) -> dict[int, int]:
    """{rank: pid} of the processes torchrun (pid `launcher`) started, read from the RANK it gave each."""
    ranks = {}
    for pid in children(launcher):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        rank = next((e[5:] for e in environ if e.startswith(b"RANK=")), None)
        if rank is not None:
            ranks[int(rank)] = pid
    return ranks


SUMMARY_ENTRY = re.compile(r"rank\s*: (\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*: (-?\d+)")


def exit_codes(output: str) -> dict[int, int]:
    """{rank: exit code} of the failed processes, from torchrun's summary (negative: killed by that signal)."""
    return {int(rank): int(code) for rank, code in SUMMARY_ENTRY.findall(output)}


def polyalign_tracebacks(output: str) -> list[str]:
    """Lines of Python tracebacks printed by the ranks (torch prefixes them `[rankN]:`) or through polyalign's code;
    torchrun's own (its ChildFailedError or SignalException) runs through torch's files alone."""
    return [
        line
        for line in output.splitlines()
        if re.match(r"\[rank\d+\]:", line) or (line.strip().startswith('File "') and "/polyalign/" in line)
    ]


def said_lines(output: str) -> list[str]:
    """What polyalign's processes said: the lines that are neither torch's logging nor its launcher summary."""
    return [line for line in output.splitlines() if re.match(r"(rank \d+: )?(error: |SIGTERM |SIGINT |done: )", line)]


def resume_command(said: str) -> list[str]:
    """The command a line says continues the run (`torchrun ... polyalign.cli pretrain --resume ...`), as argv."""
    command = shlex.split(re.search(r"`(torchrun [^`]*)`", said)[1])
    return [sys.executable, "-m", "torch.distributed.run", *command[1:]]


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
    command = f"python -m bench.perf.reliability --trials {args.trials} --seed {args.seed}"
    run = {"steps": STEPS, "save_every": SAVE_EVERY, "keep_checkpoints": KEEP}
    saved = {"code": commit(), "machine": machine(), "command": command, "run": run, "summary": summary}
    write_json(RESULTS / "reliability.json", saved | {"trials": trials})
    write_page(saved | {"trials": trials}, RESULTS / "reliability.md")
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


def write_page(saved: dict, page: Path) -> Path:
    """reliability.md from what the bench saved (its JSON), drawn by the one writer."""
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
    page.write_text(page_text(["# Kill -9 and resume", "", protocol, "", counts, trials]), encoding="utf-8")
    return page


if __name__ == "__main__":
    main()
