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

import sys

import typer
from typer._click import exceptions as click_errors  # typer (pinned) vendors its own click

from polyalign.cli import align, evaluate, finetune, models, prepare, pretrain, quickstart
from polyalign.io import DataError
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


def main(args: list[str] | None = None) -> None:
    """Run the CLI; bad input of any kind (options, files, recipes) ends in one line and exit code 2."""
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
    except (KeyboardInterrupt, typer.Abort):
        console.print("interrupted")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True, markup=True)
    sys.exit(2)


__all__ = ["app", "main"]
