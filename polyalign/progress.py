"""Progress bars that suit where they are going: a live bar on a terminal, clean periodic lines in a log file.

`tqdm` here is tqdm's own, except that when stderr is not a terminal each refresh becomes one plain line
(no carriage returns, no cursor movement) at most every LOG_INTERVAL seconds. `ticking` shows elapsed time
for work that reports no progress of its own (SentencePiece training).
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm as _tqdm

LOG_INTERVAL = 30.0
"""Seconds between progress lines written to a file or pipe."""
_CONTROL = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class LineWriter:
    """A file wrapper that turns tqdm's carriage-return refreshes into whole lines, dropping blank ones."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        for part in re.split(r"[\r\n]", _CONTROL.sub("", text)):
            if part.strip():
                self.stream.write(part.rstrip() + "\n")

    def flush(self) -> None:
        self.stream.flush()


def tqdm(*args, **kwargs) -> _tqdm:
    """tqdm, writing periodic plain lines when its output (stderr by default) is not a terminal."""
    stream = kwargs.get("file") or sys.stderr
    if not kwargs.get("disable") and not _is_terminal(stream):
        kwargs["file"] = LineWriter(stream)
        kwargs["mininterval"] = max(kwargs.get("mininterval", 0.1), LOG_INTERVAL)
        kwargs["dynamic_ncols"] = False
        kwargs.setdefault("ncols", 100)
    return _tqdm(*args, **kwargs)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def ticking(description: str, enabled: bool = True, every: float = 1.0) -> Iterator[None]:
    """Show `description` with the elapsed time while the body runs (for work without progress callbacks)."""
    if not enabled:
        yield
        return
    bar = tqdm(total=None, desc=description, bar_format="{desc}: {elapsed} elapsed", leave=True)
    done = threading.Event()

    def tick() -> None:
        while not done.wait(every):
            bar.refresh()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        bar.close()
