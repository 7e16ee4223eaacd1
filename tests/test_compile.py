"""torch.compile in pre-training: on by default with CUDA only, and a step whose MLM head sees a new masked-row
count every batch compiles a handful of graphs, not one per count."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

import polyalign.model.losses as losses
import polyalign.objectives.mlm as mlm
from polyalign.config import load_recipe
from polyalign.data.layout import sentence_layout
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.objectives.mlm import MLM, MLMConfig, masked_batch
from polyalign.tokenizer import SpecialTokens
from polyalign.train import PretrainingModule, pretrain
from polyalign.train.distributed import compiles, wrap_for_processes
from tests.conftest import metrics, tiny_config, tiny_recipe_overrides

CUDA, CPU = torch.device("cuda"), torch.device("cpu")


def test_compile_is_on_with_cuda_and_off_on_a_cpu_by_default(monkeypatch):
    recipe = load_recipe("mlm")
    assert recipe.trainer.compile == "auto"
    assert compiles("auto", CUDA) and not compiles("auto", CPU)
    assert compiles(True, CPU) and not compiles(False, CUDA)
    seen = []
    monkeypatch.setattr(torch, "compile", lambda module, options: seen.append(options) or ("compiled", module))
    module = torch.nn.Linear(2, 2)
    wrapped = {d: wrap_for_processes(module, recipe.trainer, recipe.objectives, 1, d) for d in (CUDA, CPU)}
    assert wrapped[CUDA] == ("compiled", module)  # the device is only named
    assert wrapped[CPU] is module
    # Inductor's coalescing analysis failed an assertion compiling a training step on CUDA (torch 2.11)
    assert seen == [{"triton.coalesce_tiling_analysis": False}]
    assert load_recipe("mlm", ["trainer.compile=false"]).trainer.compile is False
    assert load_recipe("mlm", ["trainer.compile=true"]).trainer.compile is True
    with pytest.raises(DataError, match=r"trainer: compile='maybe': use auto, true or false$"):
        load_recipe("mlm", ["trainer.compile=maybe"])
    with pytest.raises(DataError, match=r"trainer.compile: 3 is not true or false or a string$"):
        load_recipe("mlm", ["trainer.compile=3"])


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
def test_new_masked_counts_do_not_compile_new_graphs(monkeypatch, fused):
    monkeypatch.setattr(mlm, "FUSED_ON_CPU", fused)
    # chunks of 16 rows, so that the losses' chunk loops run several times, as they do at real sizes
    monkeypatch.setattr(mlm, "cross_entropy", partial(losses.cross_entropy, chunk=16))
    monkeypatch.setattr(losses, "LOGIT_CHUNK_BYTES", 16 * 4 * 256)  # 256: the padded vocabulary's rows
    config = tiny_config(vocab_size=200)
    special = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=200, first_normal=5)
    torch.manual_seed(0)
    module = PretrainingModule(MaskedLanguageModel(config), {"mlm": MLM(MLMConfig(), special, config)}, {"mlm": 1})
    graphs = []

    def count(graph, example_inputs):  # a backend that records what dynamo hands it and runs it as traced
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    compiled = torch.compile(module, backend=count)
    compiled_after = []
    for seed, share in enumerate((0.05, 0.2, 0.35, 0.6, 0.85)):  # new counts; 64-row buckets 1, 1, 2, 3, 4
        rng = np.random.default_rng(seed)
        rows = [rng.integers(5, 200, 62) for _ in range(4)]
        batch = masked_batch(sentence_layout(rows, None, special), special, MLMConfig(mask_prob=share), rng)
        loss = compiled({"mlm": batch})[0]
        loss.backward()
        compiled_after.append(len(graphs))
    torch._dynamo.reset()
    # a size seen changing recompiles once, symbolic (automatic dynamic shapes): from the third batch on, the
    # masked count and its bucket have both changed, and new counts (in new buckets) compile nothing
    assert compiled_after[4] == compiled_after[2], compiled_after


@pytest.mark.integration
def test_a_cpu_run_with_compile_forced_on_trains_and_logs_its_compile_time(sample_prepared, tmp_path):
    overrides = [*tiny_recipe_overrides(sample_prepared, steps=2), "trainer.log_every=1", "trainer.compile=true"]
    pretrain(load_recipe("mlm", overrides), tmp_path / "run", progress=False)
    records = metrics(tmp_path / "run")
    assert records[0]["compile_seconds"] > 0 and "compile_seconds" not in records[1]
    assert all(np.isfinite(r["loss"]) for r in records)
