"""Runs under torchrun as the reliability bench and the two-process tests (tests/test_rank_failures.py) watch them:
the launcher's processes, what its summary says, what the ranks said."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

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


def exited(pid: int) -> bool:
    """Whether process `pid` has ended (gone, or a zombie its parent has not yet collected)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"
