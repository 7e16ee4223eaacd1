"""Pre-training: the one loop (loop.py), a run's build (run.py, start.py for `init_from`), its checkpoints
(saving.py), several processes (distributed.py), the optimizer, schedule and update (optim.py), logging
(metrics.py), the head-only warm-up phase of a start without a trained MLM head (head_warmup.py), a resume's
checks and record (resume.py), the run folder held by one process and the ways a run ends early: signals and
failures (guard.py).

Data are organised in *slots*: with W processes and A accumulation steps, each optimizer step consumes W·A
micro-batches, and micro-batch slot s = rank·A + a always comes from the same seeded stream. So 2 processes
x 1 accumulation step and 1 process x 2 accumulation steps see identical data, and resuming restores
every slot's stream and masking generator exactly.
"""

from polyalign.train.distributed import (
    agree_on_stop,
    bookkeeping_group,
    init_distributed,
    reduce_window,
    unused_parameters_possible,
)
from polyalign.train.loop import (
    active_objectives,
    flops_stop,
    fold_counters,
    log_window,
    pretrain,
    start_loader,
    stop_step,
    train_step,
)
from polyalign.train.metrics import METRICS_FILE, MetricsLog, Window
from polyalign.train.optim import (
    drop_held_gradients,
    learning_rate_factor,
    linear_schedule,
    parameter_groups,
    update_parameters,
)
from polyalign.train.run import RECIPE_FILE, PretrainingModule, Run, Slot, build_run, load_run_recipe
from polyalign.train.saving import restore_run, save_run
from polyalign.train.start import build_model, check_warm_start

__all__ = [
    "METRICS_FILE",
    "RECIPE_FILE",
    "MetricsLog",
    "PretrainingModule",
    "Run",
    "Slot",
    "Window",
    "active_objectives",
    "agree_on_stop",
    "bookkeeping_group",
    "build_model",
    "build_run",
    "check_warm_start",
    "drop_held_gradients",
    "flops_stop",
    "fold_counters",
    "init_distributed",
    "learning_rate_factor",
    "linear_schedule",
    "load_run_recipe",
    "log_window",
    "parameter_groups",
    "pretrain",
    "reduce_window",
    "restore_run",
    "save_run",
    "start_loader",
    "stop_step",
    "train_step",
    "unused_parameters_possible",
    "update_parameters",
]
