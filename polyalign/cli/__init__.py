"""The `polyalign` command, one module per command group:

  prepare                   prepare.py    train or load a tokenizer, tokenize a corpus into shards
  pretrain                  pretrain.py   pre-train an encoder with the objectives a recipe names
  evaluate tatoeba|bucc|alignment
                            evaluate.py   sentence retrieval, bitext mining, word-alignment AER
  align, fit-aligner        align.py      word-align a user's bitext (Pharaoh links); fit an aligner to it first
  finetune, xtreme          finetune.py   XTREME-style fine-tuning of one task or several
  import-e5, trim-vocab, export, plug-out, interpolate
                            models.py     write model folders
  quickstart                quickstart.py the main job on the bundled sample, start to finish

options.py defines every option that more than one command takes, once. `--set` has one grammar everywhere:
a dotted key into the command's typed config, the value read as YAML. Evaluation data defaults to the pack
named by $POLYALIGN_DATA, else shared/data/eval beside the checkout (options.eval_data).
"""

from __future__ import annotations

import errno
import functools
import signal
import sys
import threading
from pathlib import Path

import typer
from rich.markup import escape
from safetensors import SafetensorError
from typer._click import exceptions as click_errors  # typer (pinned) vendors its own click

from polyalign.cli import align, evaluate, finetune, models, prepare, pretrain, quickstart
from polyalign.io import DataError, Stopped, Terminated
from polyalign.tables import console

# Plain (click) help rather than rich's tables: at 80 columns rich cut option names and help texts short
# (`--tokenizer-sampl…`), where click wraps them whole.
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Cross-lingual pre-training with alignment objectives, and alignment measurement. Evaluation data "
    "defaults to the pack named by $POLYALIGN_DATA, else shared/data/eval beside the polyalign checkout.",
)
# Each module's commands, listed at the top level; evaluate's Typer is named, so its commands sit under `evaluate`.
for group in (prepare, pretrain, evaluate, align, finetune, models, quickstart):
    app.add_typer(group.app)


def _guarded(command):
    """A command whose Ctrl-C and cut-short inputs reach `main` as themselves: click would turn both into its
    Abort, after printing an empty line."""

    @functools.wraps(command)  # typer reads the options from the wrapped signature
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            raise Stopped("interrupted", 128 + signal.SIGINT) from None
        except EOFError as err:  # a compressed input cut short
            raise DataError(f"an input file ends early ({err}); check that it was copied whole") from None

    return run


for group in (prepare, pretrain, evaluate, align, finetune, models, quickstart):
    for info in group.app.registered_commands:
        info.callback = _guarded(info.callback)


def _terminate(signum, frame) -> None:
    raise Terminated


def main(args: list[str] | None = None) -> None:
    """Run the CLI. Whatever a user gives (options, recipes, files, folders, a full disk) ends in one line and exit
    code 2; a signal ends in one line and 128 + its number. A traceback is left only for a fault of the code."""
    in_main_thread = threading.current_thread() is threading.main_thread()  # where Python runs signal handlers
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    try:
        code = app(args=args, standalone_mode=False)
    except DataError as err:
        _fail(str(err))
    except click_errors.NoArgsIsHelpError as err:
        err.show()  # the help text, as `polyalign` alone asks for
        sys.exit(err.exit_code)
    except click_errors.UsageError as err:
        command = f" (see `{err.ctx.command_path} --help`)" if err.ctx is not None else ""
        _fail(err.format_message().replace("\n", " ") + command)
    except click_errors.ClickException as err:
        _fail(err.format_message().replace("\n", " "))
    except Stopped as err:
        _say(str(err))
        sys.exit(err.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        _say("interrupted")
        sys.exit(130)
    except Terminated:
        _say("terminated")
        sys.exit(128 + signal.SIGTERM)
    except OSError as err:
        _fail(describe_os_error(err))
    except UnicodeDecodeError as err:
        _fail(f"input is not UTF-8 text (byte 0x{err.object[err.start]:02x} at byte {err.start + 1}); save it as UTF-8")
    except FloatingPointError as err:
        _fail(str(err))
    except SafetensorError as err:
        _fail(f"a safetensors file could not be written or read ({str(err).splitlines()[0]})")
    finally:
        if in_main_thread and signal.getsignal(signal.SIGTERM) is _terminate:  # one set since stays (train/guard.py)
            signal.signal(signal.SIGTERM, previous)
    sys.exit(code if isinstance(code, int) else 0)


OS_ERROR_FIXES = {
    errno.ENOSPC: "free some space or choose another disk, then run the command again",
    errno.EDQUOT: "free some space or choose another disk, then run the command again",
    errno.EFBIG: "the file is larger than this system allows (ulimit -f); choose another disk",
    errno.EACCES: "choose a path you can write, or fix its permissions",
    errno.EPERM: "choose a path you can write, or fix its permissions",
    errno.EROFS: "the file system is read-only; choose another path",
    errno.EEXIST: "it already exists; choose another path",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "it is a folder where a file is expected",
    errno.ENOENT: "not found",
}


def describe_os_error(err: OSError) -> str:
    """One line for a failed file operation: the path, what the system said, what to do."""
    path = f"{err.filename}: " if err.filename else ""
    fix = OS_ERROR_FIXES.get(err.errno)
    if err.errno == errno.EEXIST and err.filename and Path(err.filename).is_file():
        fix = "a file is there where a folder is needed; choose another path"
    return f"{path}{err.strerror or err}" + (f"; {fix}" if fix else "")


def _speaker_prefix() -> str | None:
    """The prefix of this process's last line (None: it says nothing). Under torchrun, once one process has ended
    the launcher sends SIGTERM to the others: a process already ending ignores it, so that its line and its own
    exit code stand."""
    from polyalign.train.distributed import speaker_prefix, this_process

    if this_process()[1] > 1 and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return speaker_prefix()


def _say(message: str) -> None:
    prefix = _speaker_prefix()  # under torchrun, rank 0 speaks for the run; another rank says its own failure
    if message and prefix is not None:
        console.print(prefix + message, highlight=False, soft_wrap=True, markup=False, emoji=False)


def _fail(message: str) -> None:
    # the user's words are printed as written: `[...]` is no markup and `:x:` no emoji
    # the data loader's SIGCHLD handler raises when another of its workers ends: not in the middle of this line
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    prefix = _speaker_prefix()
    if prefix is not None:
        said = f"{escape(prefix)}[red]error:[/red] {escape(message)}"
        console.print(said, highlight=False, soft_wrap=True, markup=True, emoji=False)
    sys.exit(2)


__all__ = ["app", "main"]
