"""CUDA smoke tests: pre-train a few steps, resume, evaluate, fine-tune and align on the GPU.

Skipped without CUDA (`-m gpu` selects them on a GPU machine). Tiny models: they check that every path runs
on the device, not how fast it is (the GPU check's throughput step measures that)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from polyalign.checkpoint import checkpoint_dirs, load_model
from polyalign.config import load_recipe
from polyalign.train import load_run_recipe, pretrain
from tests.conftest import SAMPLE, losses, metrics, tiny_recipe_overrides

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.integration,  # every test here trains or runs on a trained model
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def gpu_overrides(prepared: Path, steps: int) -> list[str]:
    return tiny_recipe_overrides(prepared, steps) + ["trainer.save_every=100", "trainer.loader_workers=2"]


@pytest.fixture(scope="module")
def gpu_run(sample_prepared, tmp_path_factory) -> Path:
    """xlm (MLM + TLM) for 6 steps on CUDA, paused at step 3 and resumed."""
    run = tmp_path_factory.mktemp("gpu") / "run"
    overrides = gpu_overrides(sample_prepared, 6) + ["trainer.grad_accumulation=2"]
    pretrain(load_recipe("xlm", overrides + ["trainer.stop_at=3"]), run, progress=False)
    pretrain(load_run_recipe(run, ["trainer.stop_at=0"]), run, resume=True, progress=False)
    return run


def test_pretrain_and_resume_on_cuda(gpu_run):
    assert [s for s, _ in losses(gpu_run)] == [1, 2, 3, 4, 5, 6]
    assert all(torch.isfinite(torch.tensor(v)) for _, v in losses(gpu_run))
    assert [p.name for p in checkpoint_dirs(gpu_run)] == ["step-0000003", "step-0000006"]


def test_activation_checkpointing_and_compile_train_on_cuda(sample_prepared, tmp_path):
    overrides = gpu_overrides(sample_prepared, 3)
    pretrain(load_recipe("mlm", [*overrides, "trainer.compile=false"]), tmp_path / "plain", progress=False)
    switched = ["trainer.activation_checkpointing=true"]  # and compiled: `auto` is on with CUDA
    pretrain(load_recipe("mlm", overrides + switched), tmp_path / "switched", progress=False)
    for (_, x), (_, y) in zip(losses(tmp_path / "plain"), losses(tmp_path / "switched"), strict=True):
        assert x == pytest.approx(y, rel=2e-2)  # bf16 and dropout: the same curve up to rounding
    assert metrics(tmp_path / "switched")[0]["compile_seconds"] > 0
    assert "compile_seconds" not in metrics(tmp_path / "plain")[0]


def test_attention_without_a_mask_runs_the_flash_kernel():
    """Only the flash kernel is allowed: the encoder must not pass a mask when none is needed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from polyalign.model.encoder import Encoder
    from tests.conftest import tiny_config

    encoder = Encoder(tiny_config(hidden_size=64, num_heads=2)).cuda().eval()
    ids = torch.randint(5, 99, (2, 16), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        encoder(ids)
        with pytest.raises(RuntimeError):  # a padding mask rules flash out
            encoder(ids, attention_mask=torch.ones(2, 16, dtype=torch.bool, device="cuda"))


def test_evaluate_tatoeba_on_cuda(gpu_run):
    from polyalign.evaluate.tatoeba import evaluate_tatoeba, resolve_languages

    loaded = load_model(gpu_run, device="cuda")
    result = evaluate_tatoeba(loaded, SAMPLE / "tatoeba", resolve_languages("deu,cmn", SAMPLE / "tatoeba"))
    assert ((result.xx_to_en >= 0) & (result.xx_to_en <= 100)).all()


def test_finetune_on_cuda(gpu_run, tmp_path):
    from polyalign.finetune import Subsample, finetune_task
    from tests.test_finetune_loop import SMALL, write_pack

    pack = write_pack(tmp_path / "pack")
    loaded = load_model(gpu_run, device="cuda")
    result = finetune_task(loaded, "xnli", pack, "transfer", 1, SMALL, Subsample(max_train=4), progress=False)
    assert result["runs"][0]["steps"] == 2


def test_align_on_cuda(gpu_run):
    from polyalign.align.aligner import Aligner

    loaded = load_model(gpu_run, device="cuda")
    lines = (SAMPLE / "word_alignment" / "de-en" / "src.txt").read_text(encoding="utf-8").splitlines()[:8]
    targets = (SAMPLE / "word_alignment" / "de-en" / "tgt.txt").read_text(encoding="utf-8").splitlines()[:8]
    aligner = Aligner(loaded, encoding="pair", batch_tokens=4096, precision="bf16")
    links = aligner.align([(s.split(), t.split()) for s, t in zip(lines, targets, strict=True)], "ot", 1, None)
    assert len(links) == 8 and any(links)


def test_flex_attention_bias_equals_the_materialised_bias_on_cuda():
    """The compiled Triton kernels (tests/test_biased_attention.py checks the same math on the CPU, the plain
    relative bias too): outputs and every parameter's gradient, fp32, a padding mask, a length that is no multiple
    of the tiles. One compilation: the gated bias, whose kernel is the plain one's with another table."""
    from tests.test_biased_attention import assert_kernels_train_alike

    assert_kernels_train_alike("gated_relative", torch.device("cuda"), length=50, atol=1e-4)
