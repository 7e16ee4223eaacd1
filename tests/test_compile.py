"""torch.compile in pre-training: regional (each encoder layer and the MLM head's loss compiled on their own, one
graph per class shared by every instance), with shapes that do not depend on the data, so that a step whose masked
count changes every batch compiles nothing after its first step; a compiler failure falls back to eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

import polyalign.model.compiling as compiling
import polyalign.model.heads as heads
from polyalign.config import load_recipe
from polyalign.data.masking import IGNORE, masked_targets
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.model.compiling import Region, compile_regions, compiled_regions
from polyalign.objectives.mlm import masked_lm_loss
from polyalign.objectives.rtd import corrupt, detection_loss
from polyalign.train import PretrainingModule, pretrain
from polyalign.train.distributed import compiles, wrap_for_processes
from tests.conftest import metrics, tiny_config, tiny_recipe_overrides

CUDA, CPU = torch.device("cuda"), torch.device("cpu")


def test_compile_is_on_with_cuda_and_off_on_a_cpu_by_default(monkeypatch):
    recipe = load_recipe("mlm")
    assert recipe.trainer.compile == "auto"
    assert compiles("auto", CUDA) and not compiles("auto", CPU)
    assert compiles(True, CPU) and not compiles(False, CUDA)
    for device, expected in ((CUDA, 3), (CPU, 0)):  # the device is only named: nothing runs on it
        model = MaskedLanguageModel(tiny_config(vocab_size=99))  # 2 layers and one MLM head
        module = PretrainingModule(model, {}, {})
        assert wrap_for_processes(module, recipe.trainer, recipe.objectives, 1, device) is module
        assert len(compiled_regions(module)) == expected
    assert load_recipe("mlm", ["trainer.compile=false"]).trainer.compile is False
    assert load_recipe("mlm", ["trainer.compile=true"]).trainer.compile is True
    with pytest.raises(DataError, match=r"trainer: compile='maybe': use auto, true or false$"):
        load_recipe("mlm", ["trainer.compile=maybe"])
    with pytest.raises(DataError, match=r"trainer.compile: 3 is not true or false or a string$"):
        load_recipe("mlm", ["trainer.compile=3"])


class Recorder:
    """A compiler backend that records the graphs dynamo hands it (by region: a layer's has the q/k/v projection,
    the head's the decoder) and runs them as traced; `data_dependent` lists the values whose size depends on the
    data (a boolean selection, `nonzero`: on a GPU the host waits for the device to know it)."""

    def __init__(self):
        self.graphs: list[str] = []
        self.data_dependent: list[str] = []

    def __call__(self, graph, example_inputs):
        self.graphs.append("layer" if "qkv" in graph.code else "head" if "decoder" in graph.code else "other")
        for node in graph.graph.nodes:
            value = node.meta.get("example_value")
            if isinstance(value, torch.Tensor) and free_unbacked_symbols(value):
                self.data_dependent.append(node.format_node())
        return graph.forward


@pytest.mark.integration
@pytest.mark.parametrize("recipe", ["mlm", "xlm", "xlm-e"])
def test_a_compiled_step_compiles_nothing_after_its_first(sample_prepared, tmp_path, monkeypatch, recipe):
    """20 steps whose masked counts all differ, packed rows (a GPU's default): no graph break, no region falls back,
    and every graph is compiled in the first step: each layer class once per row shape, not once per layer."""
    recorder = Recorder()
    monkeypatch.setattr(compiling, "BACKEND", recorder)
    import polyalign.train.loop as loop

    seen, counts, step = [], [], loop.train_step

    def counted(run, item):
        counts.extend(b["masked_count"] for batches in item.slots for b in batches.values() if "masked_count" in b)
        step(run, item)
        seen.append(len(recorder.graphs))
        if len(seen) == 1:
            counted.regions = compiled_regions(run.module)

    monkeypatch.setattr(loop, "train_step", counted)
    torch._dynamo.reset()
    overrides = [*tiny_recipe_overrides(sample_prepared, steps=20), "trainer.compile=true", "data.pack=true"]
    pretrain(load_recipe(recipe, overrides), tmp_path / "run", progress=False)
    torch._dynamo.reset()
    assert len(set(counts)) > 10, counts  # the masked count changed from batch to batch
    assert dict(torch._dynamo.utils.counters["graph_break"]) == {}
    assert recorder.data_dependent == []
    assert counted.regions and not any(r.failed for r in counted.regions)
    assert len(seen) == 20 and seen[-1] == seen[0], seen  # no graph after the first step
    # one layer graph per row shape (mono and parallel rows differ in length; the second is the symbolic one), one
    # per head: never one per layer (2 layers here, 3 with XLM-E's generator)
    assert recorder.graphs.count("layer") <= (1 if recipe == "mlm" else 2), recorder.graphs
    assert recorder.graphs.count("head") <= (1 if recipe == "mlm" else 2), recorder.graphs
    assert metrics(tmp_path / "run")[0]["loss_path"] == "cross-entropy compiled into the head's graph"


def boolean_reference(model, hidden, labels):
    """The MLM loss as selected by a boolean mask (the step before targets were indices): mean cross-entropy over
    the labelled positions of (B, T, C) hidden states, on the unpadded vocabulary."""
    targets = labels != IGNORE
    head, V = model.lm_head, model.config.vocab_size
    logits = F.linear(head.features(hidden[targets]), head.decoder.weight[:V], head.decoder.bias[:V])
    return F.cross_entropy(logits, labels[targets])


def padded_vocabulary_model():
    torch.manual_seed(0)
    model = MaskedLanguageModel(tiny_config(vocab_size=99)).double()  # 99 rows padded to 128
    with torch.no_grad():  # a non-zero padding bias: a path that let the padding columns in would show it
        model.lm_head.decoder.bias.normal_()
    return model


@pytest.mark.parametrize("path", ["chunked", "fused", "compiled"])
def test_the_index_path_equals_boolean_selection_in_fp64(monkeypatch, path):
    monkeypatch.setattr(heads, "FUSED_ON_CPU", path == "fused")
    model = padded_vocabulary_model()
    rng = np.random.default_rng(0)
    ids = torch.from_numpy(rng.integers(5, 99, (3, 40)))
    labels = torch.where(torch.from_numpy(rng.random((3, 40)) < 0.3), ids, IGNORE)  # 38 targets: padded to 64
    batch = {"labels": labels, **masked_targets(labels)}
    if path == "compiled":
        head = model.lm_head
        head.masked_loss = torch.compile(head.masked_loss, backend="eager", fullgraph=True)  # traced: in-graph loss
    hidden = model(ids).last_hidden_state

    def gradients(loss):
        model.zero_grad()
        loss.backward(retain_graph=True)
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    reference = boolean_reference(model, hidden, labels)
    expected = gradients(reference)
    loss, accuracy, n = masked_lm_loss(model, hidden, batch)
    assert n == int((labels != IGNORE).sum()) and batch["masked_index"].shape == (64,)
    torch.testing.assert_close(loss, reference, rtol=1e-12, atol=1e-12)
    got = gradients(loss)
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-10, atol=1e-12, msg=name)
    assert 0.0 <= float(accuracy) <= 1.0


def test_targets_are_the_labelled_positions_in_row_major_order_padded_with_ignore():
    labels = torch.full((2, 5), IGNORE)
    labels[0, 3], labels[1, 0], labels[1, 4] = 7, 8, 9
    t = masked_targets(labels, multiple=4)
    assert t["masked_index"].tolist() == [3, 5, 9, 0]
    assert t["masked_labels"].tolist() == [7, 8, 9, IGNORE]
    assert t["masked_count"] == 3


def test_corruption_and_detection_by_index_equal_boolean_selection():
    rng = np.random.default_rng(1)
    original = torch.from_numpy(rng.integers(5, 50, (3, 9)))
    masked = torch.from_numpy(rng.random((3, 9)) < 0.4)
    masked[0, 0] = False  # the padding entries point at position 0: it must keep its own token
    labels = torch.where(masked, original, IGNORE)
    t = masked_targets(labels)
    samples = torch.from_numpy(rng.integers(5, 50, (t["masked_index"].shape[0],)))
    expected = original.clone()
    expected[masked] = samples[: int(masked.sum())]
    valid = t["masked_labels"] != IGNORE
    assert torch.equal(corrupt(original, t["masked_index"], valid, samples), expected)

    logits = torch.from_numpy(rng.normal(size=(3, 9))).requires_grad_()
    replaced = torch.from_numpy(rng.random((3, 9)) < 0.2).double()
    attention = torch.ones(3, 9, dtype=torch.long)
    attention[2, 6:] = 0
    loss, accuracy = detection_loss(logits, replaced, attention)
    real = attention.bool()
    reference = F.binary_cross_entropy_with_logits(logits[real], replaced[real])
    torch.testing.assert_close(loss, reference, rtol=1e-12, atol=1e-12)
    (grad,) = torch.autograd.grad(loss, logits)
    (expected_grad,) = torch.autograd.grad(reference, logits)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(accuracy, ((logits[real] > 0).double() == replaced[real]).double().mean())


def test_a_region_that_fails_to_compile_runs_eagerly_after_one_line(capsys, monkeypatch):
    def broken(graph, example_inputs):
        raise RuntimeError("injected compiler failure\nsecond line")

    monkeypatch.setattr(compiling, "BACKEND", broken)
    torch._dynamo.reset()
    model = MaskedLanguageModel(tiny_config(vocab_size=99))
    assert compile_regions(model) == 3
    ids = torch.randint(5, 99, (2, 7))
    out = model(ids).last_hidden_state
    out.sum().backward()
    model(ids)
    torch._dynamo.reset()
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "note: compiling Layer.forward failed (RuntimeError: injected compiler failure); it runs eagerly from here on "
        "(trainer.compile=false turns compiling off)"
    ], lines  # one line for the layers' shared region, and the second call says nothing
    assert all(isinstance(r, Region) for r in compiled_regions(model))


@pytest.mark.integration
def test_a_run_whose_compiler_fails_finishes_eagerly(sample_prepared, tmp_path, monkeypatch, capsys):
    def broken(graph, example_inputs):
        raise RuntimeError("injected compiler failure")

    monkeypatch.setattr(compiling, "BACKEND", broken)
    torch._dynamo.reset()
    overrides = [*tiny_recipe_overrides(sample_prepared, steps=3), "trainer.compile=true"]
    pretrain(load_recipe("mlm", overrides), tmp_path / "run", progress=False)
    torch._dynamo.reset()
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: compiling")]
    assert len(notes) == 2 and all("trainer.compile=false" in n for n in notes), notes  # a layer and the head
    records = metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2, 3] and all(np.isfinite(r["loss"]) for r in records)


@pytest.mark.integration
def test_a_cpu_run_with_compile_forced_on_trains_and_logs_its_compile_time(sample_prepared, tmp_path):
    overrides = [*tiny_recipe_overrides(sample_prepared, steps=2), "trainer.log_every=1", "trainer.compile=true"]
    pretrain(load_recipe("mlm", overrides), tmp_path / "run", progress=False)
    records = metrics(tmp_path / "run")
    assert records[0]["compile_seconds"] > 0 and "compile_seconds" not in records[1]
    assert records[0]["loss_path"] == "cross-entropy compiled into the head's graph"
    assert all(np.isfinite(r["loss"]) for r in records)
