"""What a command writes: never one of its inputs, and by one process at a time.

Every command that writes calls `hold_output` with its output and the inputs it reads. The output is refused when it
is an input, lies inside one, or would replace a folder that holds one; then it is locked while the command writes:
an io.FolderLock on `.NAME.lock` beside it, the same flock a training run holds on its folder (train/guard.py), so a
second writer is told who holds it and a killed holder's lock is stale by construction. A process that claims an
output it already holds (a command, then the workflow it calls) nests without waiting on itself; an output inside a
held one (OUT, then OUT/run) has its own lock file, so nested claims never deadlock.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from polyalign.io import DataError, FolderLock, recover_atomic_leftovers

Inputs = dict[str, "Path | str | None | Iterable[Path | str]"]
"""Each input by the option that names it (`--model`, `data.prepared`); a value may be a list (repeatable options)."""

_HELD: dict[Path, int] = {}
"""The lock files this process holds, by how many claims nest on each."""


def _paths(value) -> list[Path]:
    if value is None:
        return []
    if isinstance(value, (str, Path)):
        return [Path(value)]
    return [Path(v) for v in value if v is not None]


def check_output(out: Path, inputs: Inputs, option: str = "--out", replaces: bool = False) -> None:
    """A one-line DataError when `out` is an input, lies inside one, or (`replaces`: the command replaces an existing
    folder) holds one; symbolic links are followed, so a link to an input is that input."""
    target = Path(out).resolve()
    for name, value in inputs.items():
        for path in _paths(value):
            source = path.resolve()
            if target == source:
                raise DataError(f"{option} {out}: is the {name} input; write the output to another path")
            if source in target.parents:
                raise DataError(f"{option} {out}: lies inside the {name} input {path}; write the output outside it")
            if replaces and target in source.parents and target.exists():
                raise DataError(
                    f"{option} {out}: holds the {name} input {path}, which replacing it would delete; "
                    "choose another path"
                )


def _make_parents(folder: Path) -> list[Path]:
    """Create `folder` and its missing parents (an OSError, a file in the way, is the CLI's one line); the ones
    created, deepest first."""
    missing = [p for p in [folder, *folder.parents] if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    return missing


@contextmanager
def hold_output(
    out: Path | None, command: str, inputs: Inputs | None = None, option: str = "--out", replaces: bool = False
) -> Iterator[None]:
    """Check `out` against `inputs` (see `check_output`), then hold its lock while the block writes it; remove what
    an earlier run killed while writing it left (its `.NAME.tmp-*`). No output (None): nothing to hold."""
    if out is None:
        yield
        return
    out = Path(out)
    check_output(out, inputs or {}, option, replaces)
    lock_path = out.absolute().parent / f".{out.name}.lock"
    key = lock_path.parent.resolve() / lock_path.name if lock_path.parent.exists() else lock_path
    if key in _HELD:  # this process holds it already (a command, then the workflow it calls)
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    created = _make_parents(lock_path.parent)
    key = lock_path.parent.resolve() / lock_path.name
    busy = f"{out}: another `{command}` (pid {{pid}}) is writing it; wait for it or choose another {option}"
    try:
        lock = FolderLock(lock_path, busy)
    except PermissionError as err:
        raise DataError(f"{out}: cannot write beside it ({err.strerror}); choose another {option}") from None
    _HELD[key] = 1
    try:
        for note in recover_atomic_leftovers(lock_path.parent, out.name):
            print(f"note: {note}", file=sys.stderr)
        yield
    finally:
        del _HELD[key]
        lock.release()
        for folder in created:  # parents made only to hold the lock, when nothing was written into them
            try:
                folder.rmdir()
            except OSError:
                break
