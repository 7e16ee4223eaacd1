"""Reading user text safely and writing files atomically.

Every problem with a user's file is reported as a `DataError` whose message is one line naming the
file and line, so the CLI can print it without a traceback.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


class DataError(ValueError):
    """A problem with user input, reported to the user as one line (file:line: what, and what to do)."""


class Stopped(Exception):
    """A command that stopped early as asked (a signal), reported as one line and its own exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class Terminated(BaseException):
    """SIGTERM outside a training run: raised in the main thread so that cleanup (`finally`, atomic writes) runs."""


def where(path: str | Path, line: int | None = None) -> str:
    return f"{path}:{line}" if line is not None else str(path)


def open_binary(path: str | Path) -> IO[bytes]:
    """Open a text file for reading as bytes, transparently decompressing `.gz`."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    return GzipText(path) if path.suffix == ".gz" else open(path, "rb")


class GzipText(gzip.GzipFile):
    """A `.gz` file read by lines, whose damage (a cut or corrupted stream) is a DataError naming it."""

    def __init__(self, path: Path):
        super().__init__(path, "rb")
        self.path = path

    def _damaged(self, err: Exception) -> DataError:
        if isinstance(err, EOFError):
            return DataError(f"{self.path}: an input file ends early ({err}); check that it was copied whole")
        return DataError(f"{self.path}: not readable gzip data ({err}); check that it was copied whole")

    def read(self, size: int = -1) -> bytes:
        try:
            return super().read(size)
        except (EOFError, OSError, zlib.error) as err:
            raise self._damaged(err) from None

    def readline(self, size: int = -1) -> bytes:
        try:
            return super().readline(size)
        except (EOFError, OSError, zlib.error) as err:
            raise self._damaged(err) from None


@dataclass
class LinePolicy:
    """What counts as a bad line and what to do with one."""

    max_chars: int = 2000
    """Lines longer than this many characters are bad (over-long)."""
    on_bad: str = "skip"
    """`error`: stop at the first bad line; `skip`: drop it and count it."""
    fix: str = "fix the line or pass --bad-lines skip"
    """What the error for a bad line tells the user to do (a command without --bad-lines says otherwise)."""

    def __post_init__(self) -> None:
        if self.on_bad not in ("error", "skip"):
            raise ValueError(f"on_bad={self.on_bad!r}: use 'error' or 'skip'")


@dataclass
class BadLineCounter:
    """Counts skipped lines by reason, remembering the first place each reason occurred."""

    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)

    def add(self, reason: str, location: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        self.first.setdefault(reason, location)

    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        return ", ".join(f"{n} {r} (first at {self.first[r]})" for r, n in sorted(self.counts.items()))


def check_line(raw: bytes, policy: LinePolicy) -> tuple[str | None, str | None]:
    """Decode and validate one raw line. Returns (text, None) or (None, reason)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return None, f"invalid UTF-8 (byte 0x{raw[err.start]:02x} at byte {err.start + 1})"
    text = text.rstrip("\r\n").strip()
    if not text:
        return None, "empty line"
    if len(text) > policy.max_chars:
        return None, f"over-long line ({len(text)} > {policy.max_chars} characters)"
    return text, None


def _reason_kind(reason: str) -> str:
    return reason.split(" (")[0]


def read_lines(path: str | Path, policy: LinePolicy, bad: BadLineCounter | None = None) -> Iterator[tuple[int, str]]:
    """Yield (line_number, text) for the good lines of a file, streaming; bad lines raise or are counted."""
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            text, reason = check_line(raw, policy)
            if reason is None:
                yield lineno, text
                continue
            if policy.on_bad == "error":
                raise DataError(f"{where(path, lineno)}: {reason}; {policy.fix}")
            if bad is not None:
                bad.add(_reason_kind(reason), where(path, lineno))


def read_parallel(
    src: str | Path, tgt: str | Path, policy: LinePolicy, bad: BadLineCounter | None = None
) -> Iterator[tuple[int, str, str]]:
    """Yield (line_number, src_text, tgt_text) from two line-aligned files; a pair is bad if either side is.

    Files with different line counts are an error whatever the policy: the pairing would be wrong.
    """
    with open_binary(src) as fs, open_binary(tgt) as ft:
        lineno = 0
        while True:
            rs, rt = fs.readline(), ft.readline()
            if not rs and not rt:
                return
            lineno += 1
            if not rs or not rt:
                short, long_ = (src, tgt) if not rs else (tgt, src)
                raise DataError(
                    f"{where(long_, lineno)}: parallel files differ in length: {short} ends after "
                    f"{lineno - 1} lines; the two sides must be line-aligned"
                )
            yield from _pair_or_bad(lineno, (rs, src), (rt, tgt), policy, bad)


def read_tsv_pairs(
    path: str | Path, policy: LinePolicy, bad: BadLineCounter | None = None
) -> Iterator[tuple[int, str, str]]:
    """Yield (line_number, src_text, tgt_text) from a two-column TSV file."""
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            cols = raw.rstrip(b"\r\n").split(b"\t")
            if len(cols) != 2:
                reason = f"expected 2 tab-separated columns, found {len(cols)}"
                if policy.on_bad == "error":
                    raise DataError(f"{where(path, lineno)}: {reason}")
                if bad is not None:
                    bad.add("malformed TSV row", where(path, lineno))
                continue
            yield from _pair_or_bad(lineno, (cols[0], path), (cols[1], path), policy, bad)


def _pair_or_bad(lineno, src_side, tgt_side, policy, bad):
    texts = []
    for raw, path in (src_side, tgt_side):
        text, reason = check_line(raw, policy)
        if reason is not None:
            if policy.on_bad == "error":
                raise DataError(f"{where(path, lineno)}: {reason}; {policy.fix}")
            if bad is not None:
                bad.add(_reason_kind(reason), where(path, lineno))
            return
        texts.append(text)
    yield lineno, texts[0], texts[1]


# ---------------------------------------------------------------------------------------------------------
# Atomic writes: a reader never sees a half-written file or folder, and nothing existing is clobbered.
# Durable too: file contents, then their folder, reach the disk before the rename that publishes them, so
# a crash (or kill -9) leaves either the old state or the complete new one. Permissions follow the umask.


def current_umask() -> int:
    try:  # Linux: read it without changing it
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_path(path: str | Path) -> None:
    """Flush a file's or a folder's entry to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    for root, _, files in os.walk(folder):
        for f in files:
            fsync_path(Path(root) / f)
        fsync_path(root)


def follow_umask(folder: Path) -> None:
    """Give a folder, its subfolders and its files the modes the umask says (0o777 / 0o666 & ~umask): mkdtemp,
    mkstemp and safetensors' own temporary file make them owner-only, which another user cannot read."""
    mask = current_umask()
    for root, _, files in os.walk(folder):
        os.chmod(root, 0o777 & ~mask)
        for f in files:
            os.chmod(Path(root) / f, 0o666 & ~mask)


def refuse_existing(final: str | Path, overwrite: bool, fix: str = "choose another path or remove it yourself") -> None:
    """A one-line error when `final` exists and may not be replaced; `fix` says what to do instead."""
    if Path(final).exists() and not overwrite:
        raise DataError(f"{final}: already exists; {fix}")


@contextmanager
def atomic_dir(final: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Build a folder under a temporary name beside `final`, then fsync it and rename it into place."""
    final = Path(final)
    refuse_existing(final, overwrite)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        follow_umask(tmp)
        fsync_tree(tmp)
        if final.exists():  # overwrite: move the old one aside first so a crash never loses both
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        fsync_path(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def atomic_text_file(path: str | Path) -> Iterator[IO[str]]:
    """A UTF-8 text file written (streaming) under a temporary name beside `path`, renamed into place when the
    block ends without an error; otherwise removed, leaving `path` as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~current_umask())  # mkstemp makes it owner-only
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_path(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_text_file(path) as f:
        f.write(text)


def recover_atomic_leftovers(parent: Path, name: str = "*") -> list[str]:
    """After a crash inside atomic_dir: delete half-built `.NAME.tmp-*` folders, and put back a `.NAME.old-*`
    folder whose replacement never arrived (`name`: only those of one folder). Only safe when no writer of
    them is running. Returns what was done."""
    done = []
    for p in sorted(Path(parent).glob(f".{name}.tmp-*")) + sorted(Path(parent).glob(f".{name}.old-*")):
        name, kind = p.name[1:].rsplit(".", 1)
        final = p.with_name(name)
        if kind.startswith("old-") and not final.exists():
            os.replace(p, final)
            done.append(f"restored {final.name} from an interrupted replacement")
        else:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            done.append(f"removed the half-written {p.name}")
    return done


def read_text(path: str | Path) -> str:
    """A UTF-8 text file's contents; a file in another encoding (Latin-1, UTF-16) is a DataError at the line of
    its first byte that is not UTF-8."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{where(path, line)}: not UTF-8 text (byte 0x{data[err.start]:02x}); save the file as UTF-8"
        ) from None


# ---------------------------------------------------------------------------------------------------------
# Exclusive locks: one process at a time in a folder. flock is released by the kernel when its holder exits,
# however it exits (kill -9 included), so a lock file left behind is never mistaken for a live holder.


class FolderLock:
    """An exclusive flock on `path`, taken without waiting; holds the holder's pid. `release` removes the file."""

    def __init__(self, path: str | Path, busy: str):
        """`busy`: what the DataError says when another process holds the lock ({pid} is the holder's)."""
        import fcntl

        self.path = Path(path)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666 & ~current_umask())
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
                os.close(fd)
                raise DataError(busy.format(pid=holder)) from None
            # The holder before us may have removed the file between our open and our flock: then we hold an
            # orphan inode, and a third process could lock a new file at the same path. Lock the path's file.
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd: int | None = fd

    def release(self) -> None:
        if self.fd is None:
            return
        self.path.unlink(missing_ok=True)  # while still held: nobody can lock the file we remove
        os.close(self.fd)
        self.fd = None


def write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def read_json(path: str | Path):
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise DataError(f"{where(path, err.lineno)}: invalid JSON ({err.msg})") from None
