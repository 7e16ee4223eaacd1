"""Step 1 of the GPU check: GPU, memory, driver / CUDA / torch versions, bf16, SDPA's flash kernel."""

from __future__ import annotations

import platform
import subprocess

from bench.perf.gpu.step import NO_CUDA, Step, one_line

# Dense bf16 peak, TFLOP/s, by the name torch reports (NVIDIA data sheets, without sparsity).
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 SXM", 989.0), ("H100 80GB HBM3", 989.0), ("H200", 989.0))
PEAK_BF16_TFLOPS += (("A100", 312.0),)


def step_environment(step: Step) -> None:
    import torch

    versions = dict(torch=torch.__version__, python=platform.python_version(), transformers=_version("transformers"))
    step.part("versions", status="ok", **versions)
    if not torch.cuda.is_available():
        step.part("gpu", status=NO_CUDA, cpu_threads=torch.get_num_threads())
        return
    props = torch.cuda.get_device_properties(0)
    step.part(
        "gpu",
        status="ok",
        name=props.name,
        memory_gib=props.total_memory / 2**30,
        count=torch.cuda.device_count(),
        capability=f"{props.major}.{props.minor}",
        driver=_nvidia_smi("driver_version"),
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(),
        nccl=".".join(map(str, torch.cuda.nccl.version())) if torch.distributed.is_nccl_available() else "none",
        bf16=torch.cuda.is_bf16_supported(),
        peak_bf16_tflops=peak_bf16_tflops(props.name) or "unknown",
    )
    step.part("flash attention", **flash_attention())


def flash_attention() -> dict:
    """Whether SDPA's flash kernel runs here: a real call with only that kernel allowed."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(2, 12, 512, 64, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(q, q, q)
        torch.cuda.synchronize()
    except RuntimeError as e:
        return {"status": f"failed: {one_line(str(e))}", "enabled": torch.backends.cuda.flash_sdp_enabled()}
    return {"status": "ok", "enabled": torch.backends.cuda.flash_sdp_enabled()}


def peak_bf16_tflops(name: str) -> float | None:
    for key, tflops in PEAK_BF16_TFLOPS:
        if all(word in name for word in key.split()):
            return tflops
    return None


def _nvidia_smi(field: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True)
    except FileNotFoundError:
        return "unknown (no nvidia-smi)"
    return out.stdout.decode().strip().splitlines()[0] if out.returncode == 0 else "unknown"


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"
