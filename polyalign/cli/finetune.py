"""`polyalign finetune` and `polyalign xtreme`: XTREME-style fine-tuning of one task or several (polyalign/finetune).

Their `--set` is pretrain's grammar on a fine-tuning run's config: `finetune.KEY=VALUE` for the loop's settings,
`task.KEY=VALUE` for the task's options; xtreme takes these for every task, or prefixed with a task's name
(`xnli.finetune.lr=1e-4`) for that task alone.
"""

from __future__ import annotations

import ast
import inspect
from typing import Annotated

import typer
from rich.console import Console
from typer.core import TyperCommand

from polyalign.cli.options import (
    Device,
    EvalPack,
    MaxEval,
    MaxSelect,
    MaxTrain,
    ModelFolder,
    Progress,
    ResultsFolder,
    Sets,
    Setting,
    SettingOption,
    TrustPickle,
    comma_list,
    load_on_device,
    model_label,
    provenance,
)
from polyalign.io import DataError
from polyalign.outputs import hold_output
from polyalign.tables import console

app = typer.Typer()


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
    sections = (("finetune", FinetuneConfig, first[1], others), ("task", type(task.options), asdict(task.options), []))
    for section, cls, defaults, other in sections:
        docs = field_docs(cls)
        for key, value in defaults.items():
            differs = [f"{setting}: {v[key]}." for setting, v in other if v[key] != value]
            rows.append((f"{section}.{key}={value}", " ".join([*differs, docs.get(key, "")])))
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


# ---------------------------------------------------------------------------------------------------------
# The commands


@app.command(cls=TaskHelp)
def finetune(
    task: Annotated[str, typer.Argument(help="xnli, pawsx, ner, pos or qa.")],
    model: ModelFolder,
    setting: SettingOption = Setting.transfer,
    seeds: Annotated[int, typer.Option(help="Fine-tuning runs (seeds 0..N-1); mean ± standard deviation.")] = 3,
    out: ResultsFolder = None,
    data: EvalPack = None,
    set_: Sets = None,
    max_train: MaxTrain = 0,
    max_select: MaxSelect = 0,
    max_eval: MaxEval = 0,
    code_switch: Annotated[
        bool,
        typer.Option(
            help="PPA §2.3: train each translated pair as (a_xx, b_en) + (a_en, b_xx) in one batch "
            "(xnli, pawsx, qa; translate-train-all; the same as --set task.code_switch=true)."
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
    progress: Progress = True,
    device: Device = None,
    trust_pickle: TrustPickle = False,
) -> None:
    """Fine-tune on one task and score every language: per-language mean ± std, average, transfer gap, protocol."""
    from polyalign.finetune import Subsample, build_task, configure, finetune_task
    from polyalign.finetune.results import write_results

    setting = setting.value
    overrides = list(set_ or [])
    if plug_in:
        if task not in ("xnli", "pawsx"):
            raise DataError(f"--plug-in: VECO plug-in fine-tuning is for the pair tasks xnli and pawsx, not {task}")
        if setting != Setting.translate_train_all:
            raise DataError("--plug-in pairs every input with its translation: use --setting translate-train-all")
        overrides.append("task.plug_in=true")
    if code_switch:
        if not hasattr(build_task(task).options, "code_switch"):
            raise DataError(f"--code-switch: {task} has no code-switching (PPA §2.3 covers xnli, pawsx and qa)")
        overrides.append("task.code_switch=true")
    configure(build_task(task), setting, overrides)  # a bad --set fails here, before the model loads
    with hold_output(out, "polyalign finetune", {"--model": model, "--data": data}):
        loaded = load_on_device(model, device, trust_pickle)
        if plug_in and not loaded.model.config.cross_attention:
            raise DataError(f"--plug-in: {model} has no cross-attention; plug-in fine-tuning needs a VECO model")
        sample = Subsample(max_train, max_select, max_eval)
        result = finetune_task(loaded, task, data, setting, seeds, overrides, sample, progress)
        print_finetune(result, model_label(model, loaded))
        if out is not None:
            title = f"Fine-tuning: {task} ({setting})"
            md, _ = write_results(out, "finetune", [result], title, **provenance(model, loaded))
            console.print(f"results: {md} (+ .json)")


@app.command()
def xtreme(
    model: ModelFolder,
    tasks: Annotated[str, typer.Option(help="Comma list of tasks.")] = "xnli,pawsx,ner,pos,qa",
    set_: Sets = None,
    setting: SettingOption = Setting.transfer,
    seeds: Annotated[str, typer.Option(help="Seeds for every task (`3`) or per task (`xnli=3,ner=3,qa=1`).")] = "3",
    out: ResultsFolder = None,
    data: EvalPack = None,
    max_train: MaxTrain = 0,
    max_select: MaxSelect = 0,
    max_eval: MaxEval = 0,
    progress: Progress = True,
    device: Device = None,
    trust_pickle: TrustPickle = False,
) -> None:
    """Fine-tune and score several tasks in a row; one results table with each task's averages, gap, protocol."""
    from polyalign.finetune import TASKS, Subsample, build_task, configure, finetune_task
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
    overrides = {name: overrides_for(name, names, set_ or []) for name in names}
    for name in names:  # every task's --set checked before the first one trains
        configure(build_task(name), setting, overrides[name])
    with hold_output(out, "polyalign xtreme", {"--model": model, "--data": data}):
        loaded = load_on_device(model, device, trust_pickle)
        sample = Subsample(max_train, max_select, max_eval)
        results = []
        for name in names:
            n = per_task_seeds.get(name, per_task_seeds.get("", 3))
            console.rule(f"{name} ({setting}, {n} seed(s))")
            results.append(finetune_task(loaded, name, data, setting, n, overrides[name], sample, progress))
            print_finetune(results[-1], model_label(model, loaded))
            if out is not None:
                title = f"XTREME-style evaluation ({setting})"
                write_results(out, "xtreme", results, title, **provenance(model, loaded))
        Console().print(summary_markdown(results, f"Summary: {model_label(model, loaded)}"), markup=False)


def overrides_for(task: str, names: list[str], sets: list[str]) -> list[str]:
    """xtreme's `--set` values that reach `task`, in finetune's keys: the unprefixed ones (every task's) first, then
    those prefixed with the task's name, so that a task's own value wins."""
    shared, own = [], []
    for value in sets:
        head, dot, rest = value.strip().partition(".")
        if head in names and dot:
            if head == task:
                own.append(rest)
        elif head in ("finetune", "task"):
            shared.append(value)
        else:
            raise DataError(
                f"--set {value}: {head}: unknown key; known: finetune, task, {', '.join(names)} "
                f"(a task's name before finetune.KEY or task.KEY sets it for that task alone)"
            )
    return shared + own
