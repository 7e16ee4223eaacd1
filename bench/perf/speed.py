"""polyalign against transformers on the same batches: the one measurement behind every speed page.

Every comparison is the same three things: a training step as polyalign's trainer runs it (loss, backward, clipping,
fused AdamW; the same optimizer for both stacks, so that the comparison is of the model step), the same batches in
the same order for every arm, and the arms timed one step at a time, round-robin in rotating order, so that other
load on the machine falls on all of them alike. Its users: the GPU check's throughput step (bench/perf/gpu/
throughput.py, the trainer's own step beside `xlmr_mlm` and `electra_rtd`) and the e5 study's `speed` step
(`measure_continued` below: multilingual-e5-small continued on en-xx pairs, `CONTINUED`).
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from bench.reporting import median_seconds
from polyalign.config import TrainerConfig
from polyalign.model import EncoderConfig
from polyalign.tokenizer import SpecialTokens
from polyalign.train import parameter_groups, update_parameters


@dataclass(frozen=True)
class SpeedPreset:
    """The sizes one speed page compares the stacks at."""

    description: str
    model: dict | None  # EncoderConfig sizes; None: a pretrained checkpoint's own (continued training)
    batch: int  # rows a batch (sentence pairs for the pair objectives)
    length: int  # tokens a row (a side, for pairs)
    warmup: int = 2  # untimed steps first (a compiled arm compiles in them); 2 for the CPU presets
    steps: int = 5  # timed steps (rounds); 5 for the CPU presets, whose steps take seconds
    dropout: float = 0.1
    attention_dropout: float = 0.0
    learning_rate: float = 1e-4


CONTINUED = SpeedPreset(
    "multilingual-e5-small (12 x 384, 250k vocabulary) continued on en-xx pairs of ../shared/data/train, 2 cores",
    model=None,
    batch=16,
    length=64,
    learning_rate=1e-5,
)


# ---------------------------------------------------------------------------------------------------------
# The stacks: each arm is a module and its loss on a batch


def xlmr_mlm(config: EncoderConfig, special: SpecialTokens, device):
    """XLMRobertaForMaskedLM in training mode on `device`, configured as polyalign's export maps `config`;
    (module, loss of an MLM batch)."""
    from types import SimpleNamespace

    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    from polyalign.model.hf import xlmr_config

    mapped = xlmr_config(SimpleNamespace(config=config), SimpleNamespace(special=special), 1)
    torch.manual_seed(0)
    with torch.device(device):  # built where it trains: initialising 278M parameters on the CPU takes seconds
        model = XLMRobertaForMaskedLM(XLMRobertaConfig.from_dict(mapped)).train()
    inputs = ("input_ids", "attention_mask", "labels")
    return model, lambda batch: model(**{k: batch[k] for k in inputs}).loss


def electra_rtd(config: EncoderConfig, special: SpecialTokens, device, discriminator_weight: float = 50.0):
    """transformers' ELECTRA for replaced token detection at polyalign's RTD sizes: an ElectraForMaskedLM generator
    of a third of the layers sharing the token embeddings with an ElectraForPreTraining discriminator (ELECTRA
    §3.2, XLM-E Table 6); (module, loss of an MRTD batch) with loss L_G + λ·L_D, as the MRTD objective's."""
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    from polyalign.model.hf import hf_sizes
    from polyalign.objectives.rtd import corrupt, generator_config, replaced_token_labels, sample_replacements

    def electra(c: EncoderConfig) -> ElectraConfig:
        return ElectraConfig(**hf_sizes(c), embedding_size=c.hidden_size, max_position_embeddings=c.max_positions,
                             hidden_dropout_prob=c.dropout, attention_probs_dropout_prob=c.attention_dropout,
                             layer_norm_eps=c.layer_norm_eps, pad_token_id=special.pad)  # fmt: skip

    torch.manual_seed(0)
    with torch.device(device):
        generator = ElectraForMaskedLM(electra(generator_config(config)))
        discriminator = ElectraForPreTraining(electra(config))
    generator.electra.embeddings.word_embeddings = discriminator.electra.embeddings.word_embeddings
    module = torch.nn.ModuleDict({"generator": generator, "discriminator": discriminator}).train()

    def loss_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        labels, mask = batch["labels"], batch["attention_mask"]
        out = generator(input_ids=batch["input_ids"], attention_mask=mask, labels=labels)
        masked = labels != -100
        original = torch.where(masked, labels, batch["input_ids"])
        corrupted = corrupt(original, masked, sample_replacements(out.logits[masked]))
        replaced = replaced_token_labels(original, corrupted)
        detected = discriminator(input_ids=corrupted, attention_mask=mask, labels=replaced)
        return out.loss + discriminator_weight * detected.loss

    return module, loss_of


def training_step(
    module: torch.nn.Module,
    loss_of,
    learning_rate: float,
    autocast=None,
    trainer: TrainerConfig | None = None,
    schedule: Callable[[int], float] | None = None,
) -> Callable[[dict], float]:
    """step(batch) -> loss, as polyalign's trainer runs it for either stack: the loss (under `autocast`), backward,
    clipping, fused AdamW with weight decay on matrices only, over the parameters that train. `trainer`: the betas,
    eps, weight decay and clipping norm (TrainerConfig's defaults when None); `schedule`: the learning-rate factor at
    each (0-based) step (a constant learning rate when None), for a peer trained side by side with a run."""
    trainer = trainer or TrainerConfig()
    groups = parameter_groups(module, trainer)
    optimizer = torch.optim.AdamW(groups, lr=learning_rate, betas=trainer.betas, eps=trainer.eps, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule) if schedule else None
    trained = [p for g in groups for p in g["params"]]

    def step(batch) -> float:
        with autocast or contextlib.nullcontext():
            loss = loss_of(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, trainer.clip_norm)
        optimizer.step()
        if scheduler:
            scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())  # a float: the step has finished on the device

    return step


# ---------------------------------------------------------------------------------------------------------
# The measurement


def compare_on_same_batches(
    arms: Mapping[str, Callable[[], Callable[[object], float]]],
    batches: Sequence,
    warmup: int,
    steps: int,
    each_round: Callable[[], None] | None = None,
    keep_going: Callable[[], bool] = lambda: True,
) -> dict[str, dict]:
    """Build every arm (`arms[name]()` returns its step), run `warmup` untimed steps of each, then time `steps`
    rounds of one step per arm in rotating order, every arm on the same batches in the same order (in turn,
    warm-up included). `each_round` runs before each round (another measurement that should see the same load);
    `keep_going` is asked before every round after the first (a budget). Per arm: the seconds and loss of each
    timed step, and the warm-up's seconds (compilation included)."""
    built = {name: build() for name, build in arms.items()}
    turns = {name: itertools.count() for name in built}
    runs = {name: {"seconds": [], "losses": []} for name in built}

    def run(name: str) -> tuple[float, float]:
        t0 = time.perf_counter()
        loss = built[name](batches[next(turns[name]) % len(batches)])
        return time.perf_counter() - t0, loss

    for name in built:
        runs[name]["warmup_seconds"] = sum(run(name)[0] for _ in range(warmup))
    names = list(built)
    for r in range(steps):
        if r > 0 and not keep_going():
            break
        if each_round:
            each_round()
        for name in names[r % len(names) :] + names[: r % len(names)]:
            seconds, loss = run(name)
            runs[name]["seconds"].append(seconds)
            runs[name]["losses"].append(loss)
    return runs


# ---------------------------------------------------------------------------------------------------------
# `continued-250k`: multilingual-e5-small continued on en-xx pairs. The batches: TLM (PPA layout, 15% masked), 16
# pairs of up to 64 tokens a side, the languages in turn. The arms, one step each per round on the same pairs, each
# in its objective's layout: transformers' BertForMaskedLM (the same config, `labels` as HF computes them: logits
# over the 250k vocabulary at every position); polyalign's `xlm` step (TLM; MLM logits at masked positions only),
# embeddings trained and held; the `xlm-align` step (DWA: TLM + OT self-labels + the pointer loss, one forward
# pass); the `self-align` step (its encoder stops at layer 8). Then where polyalign's TLM step goes.

CONTINUED_LANGUAGES = ("de", "fr", "ro", "zh", "ja", "hi")
SHARED = Path(__file__).resolve().parents[3] / "shared"
timed = partial(median_seconds, warmup=CONTINUED.warmup)  # timed(step, batches): median seconds of step(batch)


def parallel_batches(tokenizer, count: int, pairs: int = CONTINUED.batch, length: int = CONTINUED.length):
    """`count` ParallelBatches of `pairs` en-xx pairs of ../shared/data/train/parallel, the languages in turn."""
    from polyalign.data.streams import ParallelBatch

    batches = []
    for k in range(count):
        lang = CONTINUED_LANGUAGES[k % len(CONTINUED_LANGUAGES)]
        base = SHARED / "data/train/parallel" / f"en-{lang}"
        with gzip.open(f"{base}.en.gz", "rt") as en, gzip.open(f"{base}.{lang}.gz", "rt") as xx:
            lines = [(a.strip(), b.strip()) for _, a, b in zip(range((k + 1) * pairs), en, xx, strict=False)][-pairs:]
        source, target = (
            [np.array(ids[:length]) for ids in tokenizer.encode_batch(list(side))] for side in zip(*lines, strict=True)
        )
        batches.append(ParallelBatch(source, target, np.zeros(pairs, dtype=np.int64), np.ones(pairs, dtype=np.int64)))
    return batches


def hf_bert(config):
    """transformers' BertForMaskedLM with the sizes of a polyalign encoder config (e5-small is a post-LN BERT)."""
    from transformers import BertConfig, BertForMaskedLM

    from polyalign.model.hf import hf_sizes

    sizes = dict(max_position_embeddings=config.max_positions, layer_norm_eps=config.layer_norm_eps)
    return BertForMaskedLM(BertConfig(**hf_sizes(config), **sizes, pad_token_id=config.pad_token_id,
                                      attn_implementation="sdpa")).train()  # fmt: skip


def measure_continued(model_folder: Path) -> dict:
    """Seconds per step and tokens/s of each arm on the same batches, and the parts of polyalign's TLM step."""
    import copy

    from polyalign.checkpoint import load_model
    from polyalign.objectives import build_objective

    torch.manual_seed(0)
    loaded = load_model(model_folder)
    model, special, config = loaded.model.train(), loaded.tokenizer.special, loaded.model.config
    rng, lr = np.random.default_rng(0), CONTINUED.learning_rate
    raws = parallel_batches(loaded.tokenizer, CONTINUED.warmup + CONTINUED.steps)
    objectives = {
        "xlm (TLM)": build_objective("tlm", {"style": "ppa"}, special, config),
        "xlm-align (DWA)": build_objective("dwa", {"style": "ppa"}, special, config),
        "self-align": build_objective("self_align", {}, special, config),
    }
    batches = [{name: o.make_batch(r, rng) for name, o in objectives.items()} for r in raws]  # {objective: batch}
    tokens = statistics.mean(int(b["xlm (TLM)"]["attention_mask"].sum()) for b in batches)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    held = copy.deepcopy(model)
    for name, p in held.named_parameters():
        p.requires_grad_(name.startswith("encoder.layers."))

    def ours(module, name: str):
        return lambda: training_step(module, lambda batch: objectives[name](module, batch[name]).loss, lr, autocast)

    hf = hf_bert(config)
    inputs = ("input_ids", "attention_mask", "position_ids", "labels")
    hf_loss = lambda batch: hf(**{k: batch["xlm (TLM)"][k] for k in inputs}).loss  # noqa: E731
    reference = "transformers BertForMaskedLM + AdamW (TLM)"
    arms = {
        reference: lambda: training_step(hf, hf_loss, lr, autocast),
        "polyalign xlm (TLM)": ours(model, "xlm (TLM)"),
        "polyalign xlm (TLM), embeddings held": ours(held, "xlm (TLM)"),
        "polyalign xlm-align (DWA), embeddings held": ours(held, "xlm-align (DWA)"),
        "polyalign self-align, embeddings held": ours(held, "self-align"),
    }
    measured = compare_on_same_batches(arms, batches, CONTINUED.warmup, CONTINUED.steps)
    seconds = {name: statistics.median(m["seconds"]) for name, m in measured.items()}
    parts = tlm_step_parts(model, objectives["xlm (TLM)"], [b["xlm (TLM)"] for b in batches], autocast)
    dwa = objectives["xlm-align (DWA)"]
    dwa_batches = [dwa.make_batch(r, rng) for r in raws]
    parts["OT self-labels of DWA (no grad)"] = timed(lambda batch: dwa.self_label(held, batch), dwa_batches)
    rate = lambda s: {"seconds": round(s, 3), "tokens_per_s": round(tokens / s),  # noqa: E731
                      "speed_vs_transformers": round(seconds[reference] / s, 2)}  # fmt: skip
    return {
        "batch": f"{CONTINUED.batch} pairs, up to {CONTINUED.length} tokens a side, {tokens:.0f} real tokens a batch "
        "(mean)",
        "steps": {name: rate(s) for name, s in seconds.items()},
        "tlm_step_parts": {name: round(s, 3) for name, s in parts.items()},
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def tlm_step_parts(model, tlm, batches, autocast) -> dict[str, float]:
    """Where polyalign's TLM step goes, each part timed on its own on the same batches: the encoder, the MLM output at
    masked positions against one at every position, AdamW over every parameter against the encoder layers only."""
    from polyalign.objectives.base import model_inputs

    def encoder(batch):
        with autocast:
            hidden = model(**model_inputs(batch)).last_hidden_state
        hidden.float().sum().backward()
        model.zero_grad(set_to_none=True)

    def head(masked_only: bool):
        def run(batch):
            hidden = torch.randn(*batch["input_ids"].shape, model.config.hidden_size, requires_grad=True)
            with autocast:
                logits = model.mlm_logits(hidden[batch["labels"] >= 0] if masked_only else hidden.flatten(0, 1))
            logits.float().logsumexp(-1).sum().backward()
            model.zero_grad(set_to_none=True)

        return run

    def optimizer_over(params):
        # the trainer's own update (polyalign/train/optim.py), without clipping: the optimizer's share of a step
        optimizer = torch.optim.AdamW(params, lr=1e-5, fused=True)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)

        def run(batch):
            for p in params:
                p.grad = torch.zeros_like(p)
            update_parameters(optimizer, schedule, params, clip_norm=0.0)

        return run

    layers = [p for n, p in model.named_parameters() if n.startswith("encoder.layers.")]
    return {
        "encoder forward + backward": timed(encoder, batches),
        "MLM output at masked positions (forward + backward)": timed(head(True), batches),
        "MLM output at every position (forward + backward)": timed(head(False), batches),
        "AdamW over all parameters (embeddings included)": timed(optimizer_over(list(model.parameters())), batches),
        "AdamW over the encoder layers only": timed(optimizer_over(layers), batches),
    }
