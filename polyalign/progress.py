"""Progress bars that suit where they are going: a live bar on a terminal, clean periodic lines in a log file.

`tqdm` here is tqdm's own on a terminal. Elsewhere (a log file, a pipe) it writes plain lines (no carriage
returns, no cursor movement): none when a phase starts, one every LOG_INTERVAL seconds while it runs, and one
when it ends, unless it counted nothing. `ticking` shows elapsed time for work that reports no progress of
its own (SentencePiece training).
"""

from __future__ import annotations

import re
import sys
import threading
import time
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


class LoggedProgress(_tqdm):
    """tqdm for a log: a line at most every LOG_INTERVAL seconds (none at the start, where tqdm would show
    `0 lines [00:00, ? lines/s]`), and one line when the phase ends, whether or not it is to be left."""

    timer = False
    """Set by `ticking`: a phase that counts nothing but its time, whose end is still worth a line."""

    def __init__(self, *args, **kwargs):
        self.last_line = time.time()  # before tqdm's __init__, which refreshes once
        super().__init__(*args, **kwargs)

    def refresh(self, nolock=False, lock_args=None):
        if time.time() - self.last_line < LOG_INTERVAL:
            return False
        self.last_line = time.time()
        return super().refresh(nolock, lock_args)

    def close(self) -> None:
        if not getattr(self, "disable", True) and (self.n or self.timer):
            self._ema_dt = lambda: None  # the overall rate, as tqdm's own last line shows
            self.display()
        self.leave = False  # the line is written; tqdm's close then only clears (a blank LineWriter drops)
        super().close()


def tqdm(*args, **kwargs) -> _tqdm:
    """tqdm, writing plain lines (see LoggedProgress) when its output (stderr by default) is not a terminal."""
    stream = kwargs.get("file") or sys.stderr
    if kwargs.get("disable") or _is_terminal(stream):
        return _tqdm(*args, **kwargs)
    kwargs["file"] = LineWriter(stream)
    kwargs["mininterval"] = max(kwargs.get("mininterval", 0.1), LOG_INTERVAL)
    kwargs["dynamic_ncols"] = False
    kwargs.setdefault("ncols", 100)
    return LoggedProgress(*args, **kwargs)


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
    bar.timer = True
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
