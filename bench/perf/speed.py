"""polyalign against transformers on the same batches: the one measurement behind every speed page.

Every comparison is the same three things: a training step as polyalign's trainer runs it (loss, backward, clipping,
fused AdamW; the same optimizer for both stacks, so that the comparison is of the model step), the same batches in
the same order for every arm, and the arms timed one step at a time, round-robin in rotating order, so that other
load on the machine falls on all of them alike. Its user: the GPU check's throughput step (bench/perf/gpu/
throughput.py: the trainer's own step beside `xlmr_mlm` and `electra_rtd`). The e5 study's continued-training speed
on 2 CPU cores (`measure_continued`, e5.md) is answered; its code is at commit 1936717.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Mapping, Sequence

import torch

from polyalign.config import TrainerConfig
from polyalign.model import EncoderConfig
from polyalign.tokenizer import SpecialTokens
from polyalign.train import parameter_groups

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
    from polyalign.objectives.rtd import generator_config, replaced_token_labels, sample_replacements

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
        corrupted = original.masked_scatter(masked, sample_replacements(out.logits[masked]))
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
