"""The fine-tuning commands, `finetune` and `xtreme` (polyalign/finetune): cli.py registers them."""

from __future__ import annotations

import ast
import functools
import inspect
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from typer.core import TyperCommand

from polyalign.cli_options import (
    Device,
    ModelFolder,
    Progress,
    TrustPickle,
    comma_list,
    load_on_device,
    model_label,
    provenance,
)
from polyalign.io import DataError
from polyalign.tables import console

if TYPE_CHECKING:
    from polyalign.finetune import Subsample  # imported when a command runs, so that --help stays fast

MaxTrain = Annotated[int, typer.Option(help="Subsample training examples (0 = all).")]
MaxSelect = Annotated[int, typer.Option(help="Subsample selection examples per language (0 = all).")]
MaxEval = Annotated[int, typer.Option(help="Subsample test examples per language (0 = all).")]
EvalPack = Annotated[Path, typer.Option(help="The evaluation data pack.")]


class Setting(StrEnum):
    transfer = "transfer"
    translate_train_all = "translate-train-all"


@dataclass
class SharedOptions:
    """The options `finetune` and `xtreme` share, gathered: how much of each split to use, where the model runs."""

    sample: Subsample
    progress: bool
    device: str | None
    trust_pickle: bool

    def load(self, model: Path):
        return load_on_device(model, self.device, self.trust_pickle)


def shared_options(
    max_train: MaxTrain = 0,
    max_select: MaxSelect = 0,
    max_eval: MaxEval = 0,
    progress: Progress = True,
    device: Device = None,
    trust_pickle: TrustPickle = False,
) -> SharedOptions:
    """The one declaration of the options `finetune` and `xtreme` share (see `with_shared_options`)."""
    from polyalign.finetune import Subsample

    return SharedOptions(Subsample(max_train, max_select, max_eval), progress, device, trust_pickle)


def with_shared_options(command):
    """`command` as typer reads it: its parameter `shared` stands for the parameters of `shared_options`, which
    --help lists in its place and which reach the command gathered into one `SharedOptions`."""
    own = inspect.signature(command, eval_str=True).parameters
    added = inspect.signature(shared_options, eval_str=True).parameters
    at = list(own).index("shared")

    @functools.wraps(command)
    def typer_command(**options):
        shared = shared_options(**{name: options.pop(name) for name in added})
        return command(**options, shared=shared)

    params = [*list(own.values())[:at], *added.values(), *list(own.values())[at + 1 :]]
    typer_command.__signature__ = inspect.Signature(params, return_annotation=None)
    typer_command.__annotations__ = {p.name: p.annotation for p in params}
    return typer_command


def parse_sets(values: list[str] | None) -> dict[str, str]:
    out = {}
    for v in values or []:
        if "=" not in v:
            raise DataError(f"--set {v}: expected key=value (e.g. --set epochs=2, or --set xnli.lr=1e-4 for xtreme)")
        key, value = v.split("=", 1)
        out[key.strip()] = value.strip()
    return out


# ---------------------------------------------------------------------------------------------------------
# `finetune TASK --help`: the task's paper defaults and every --set key


def field_docs(cls) -> dict[str, str]:
    """A dataclass's field docstrings (the string under each field), which Python does not keep at run time."""
    body = ast.parse(inspect.getsource(cls)).body[0].body
    return {
        a.target.id: " ".join(b.value.value.split("\n\n")[0].split())
        for a, b in zip(body, body[1:], strict=False)
        if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
    }


def task_settings(name: str) -> list[tuple[str, str]]:
    """(--set key, default and meaning) of every setting of a task: the loop's, at the task's paper defaults per
    setting, then the task's own options."""
    from dataclasses import asdict

    from polyalign.finetune import FinetuneConfig, build_task

    task = build_task(name)
    first, *others = [(s, asdict(FinetuneConfig(**values))) for s, values in task.defaults.items()]
    rows = []
    for cls, defaults, other in ((FinetuneConfig, first[1], others), (type(task.options), asdict(task.options), [])):
        docs = field_docs(cls)
        for key, value in defaults.items():
            differs = [f"{setting}: {v[key]}." for setting, v in other if v[key] != value]
            rows.append((f"{key}={value}", " ".join([*differs, docs.get(key, "")])))
    return rows


class TaskHelp(TyperCommand):
    """`finetune TASK --help` adds TASK's settings to the help (`finetune --help` alone cannot know the task)."""

    def parse_args(self, ctx, args):
        ctx.meta["words"] = list(args)  # --help is handled before the task argument is read
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter) -> None:
        super().format_help(ctx, formatter)
        from polyalign.finetune import TASKS

        task = next((w for w in ctx.meta.get("words", []) if w in TASKS), None)
        if task is None:
            formatter.write_paragraph()
            formatter.write_text("`polyalign finetune TASK --help` lists a task's defaults and --set keys.")
            return
        with formatter.section(f"{task} --set KEY=VALUE keys (defaults for transfer; other settings named)"):
            formatter.write_dl(task_settings(task), col_max=36)


def print_finetune(result: dict, label: str) -> None:
    from polyalign.finetune.results import task_markdown

    Console().print(task_markdown(result, f"{result['task']} ({result['setting']}), {label}"), markup=False)


@with_shared_options
def finetune(
    task: Annotated[str, typer.Argument(help="xnli, pawsx, ner, pos or qa.")],
    model: ModelFolder,
    setting: Annotated[
        Setting, typer.Option(help="`transfer` (train on English) or `translate-train-all`.")
    ] = Setting.transfer,
    seeds: Annotated[int, typer.Option(help="Fine-tuning runs (seeds 0..N-1); mean ± standard deviation.")] = 3,
    out: Annotated[Path | None, typer.Option(help="Folder for finetune.md and finetune.json.")] = None,
    data: EvalPack = Path("../shared/data/eval"),
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a hyperparameter or task option, e.g. epochs=2.")
    ] = None,
    *,
    shared: SharedOptions,
    code_switch: Annotated[
        bool,
        typer.Option(
            help="PPA §2.3: train each translated pair as (a_xx, b_en) + (a_en, b_xx) in one batch "
            "(xnli, pawsx, qa; translate-train-all; the same as --set code_switch=true)."
        ),
    ] = False,
    plug_in: Annotated[
        bool,
        typer.Option(
            "--plug-in",
            help="VECO plug-in fine-tuning (xnli, pawsx; translate-train-all): classify from [H^L : S^L] of each "
            "input and its translation (VECO §3.1). Needs a model with cross-attention.",
        ),
    ] = False,
) -> None:
    """Fine-tune on one task and score every language: per-language mean ± std, average, transfer gap, protocol."""
    from polyalign.finetune import finetune_task
    from polyalign.finetune.results import write_results

    setting = setting.value
    overrides = parse_sets(set_)
    if plug_in:
        if task not in ("xnli", "pawsx"):
            raise DataError(f"--plug-in: VECO plug-in fine-tuning is for the pair tasks xnli and pawsx, not {task}")
        if setting != Setting.translate_train_all:
            raise DataError("--plug-in pairs every input with its translation: use --setting translate-train-all")
        overrides["plug_in"] = "true"
    loaded = shared.load(model)
    if plug_in and not loaded.model.config.cross_attention:
        raise DataError(f"--plug-in: {model} has no cross-attention; plug-in fine-tuning needs a VECO model")
    if code_switch:
        overrides["code_switch"] = "true"
    result = finetune_task(loaded, task, data, setting, seeds, overrides, shared.sample, shared.progress)
    print_finetune(result, model_label(model, loaded))
    if out is not None:
        title = f"Fine-tuning: {task} ({setting})"
        md, _ = write_results(out, "finetune", [result], title, **provenance(model, loaded))
        console.print(f"results: {md} (+ .json)")


@with_shared_options
def xtreme(
    model: ModelFolder,
    tasks: Annotated[str, typer.Option(help="Comma list of tasks.")] = "xnli,pawsx,ner,pos,qa",
    setting: Annotated[
        Setting, typer.Option(help="`transfer` or `translate-train-all` (tasks without it fail).")
    ] = Setting.transfer,
    seeds: Annotated[str, typer.Option(help="Seeds for every task (`3`) or per task (`xnli=3,ner=3,qa=1`).")] = "3",
    out: Annotated[
        Path | None, typer.Option(help="Folder for xtreme.md and xtreme.json (rewritten after each task).")
    ] = None,
    data: EvalPack = Path("../shared/data/eval"),
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="key=value for every task, or task.key=value for one.")
    ] = None,
    *,
    shared: SharedOptions,
) -> None:
    """Fine-tune and score several tasks in a row; one results table with each task's averages, gap, protocol."""
    from polyalign.finetune import TASKS, finetune_task
    from polyalign.finetune.results import summary_markdown, write_results

    setting = setting.value
    names = comma_list(tasks) or []
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        raise DataError(f"--tasks: unknown {unknown}; choose from {', '.join(TASKS)}")
    per_task_seeds = {}
    for part in comma_list(seeds) or []:
        name, _, n = part.rpartition("=")
        if not n.isdigit() or (name and name not in names):
            raise DataError(f"--seeds {seeds}: use a number or task=number for the chosen tasks")
        per_task_seeds[name] = int(n)
    sets = parse_sets(set_)
    loaded = shared.load(model)
    results = []
    for name in names:
        overrides = {k: v for k, v in sets.items() if "." not in k}
        overrides |= {k.split(".", 1)[1]: v for k, v in sets.items() if k.startswith(f"{name}.")}
        n = per_task_seeds.get(name, per_task_seeds.get("", 3))
        console.rule(f"{name} ({setting}, {n} seed(s))")
        results.append(finetune_task(loaded, name, data, setting, n, overrides, shared.sample, shared.progress))
        print_finetune(results[-1], model_label(model, loaded))
        if out is not None:
            title = f"XTREME-style evaluation ({setting})"
            write_results(out, "xtreme", results, title, **provenance(model, loaded))
    Console().print(summary_markdown(results, f"Summary: {model_label(model, loaded)}"), markup=False)
