"""Step 3 of the GPU check: attention with XLM-E's gated relative bias (§3.3, Eq. 7) on the card, forward +
backward of one layer's attention at XLM-R-base shape (B 64, H 12, T 512, hs 64, bf16): SDPA's flash kernel without
a bias (the bound), the materialised (B, H, T, T) bias gathered at every row's positions and gathered once per layer
(H, T, T) from the columns, and FlexAttention (model/biased_attention.py) with its tile sizes (with distances from the
columns too), with torch's defaults, with small forward tiles, and with the bias's table held out of the gradient;
then FlexAttention's values and gradients against the materialised bias in fp32 on the card (the compiled Triton
kernels that the CPU tests cannot run). Last, variable-length flash attention (model/unpadded.py) over packed rows'
real tokens against padded SDPA under their mask, bf16: values, gradients and milliseconds."""

from __future__ import annotations

import time

from bench.perf.gpu.step import UNFINISHED, Step, device_name, one_line

SHAPE, DRY_SHAPE = (64, 12, 512, 64), (2, 2, 16, 8)  # B, H, T, hs
SMALL_FORWARD = {"fwd_BLOCK_M": 64, "fwd_BLOCK_N": 32, "fwd_num_stages": 1}
REPEATS, WARMUP = 10, 3


def step_kernels(step: Step) -> None:
    import torch

    from polyalign.model.biased_attention import FLEX_KERNEL_OPTIONS

    device = torch.device(device_name(step))
    B, H, T, hs = DRY_SHAPE if step.dry_run else SHAPE
    step.note(
        f"one layer's attention, forward + backward (q, k, v and the bias's table, gates and w), B {B}, H {H}, "
        f"T {T}, hs {hs}, bf16, no mask; median of {REPEATS} after {WARMUP} warm-up calls (compilation included)"
    )
    cuda = device.type == "cuda"
    arms = {
        "SDPA without a bias (flash on CUDA)": ("none", None),
        "materialised gated bias + SDPA": ("materialised", None),
        # The table gathered once at (H, T, T) (positions that follow the columns), scaled by each row's gates, through
        # SDPA's memory-efficient kernel, which returns the additive bias's gradient: what `auto` runs.
        "gated bias gathered once per layer + SDPA": ("shared", None),
        "FlexAttention, polyalign's tile sizes, distances from the columns": ("flex-columns", FLEX_KERNEL_OPTIONS),
        "FlexAttention, polyalign's tile sizes": ("flex", FLEX_KERNEL_OPTIONS),
        "FlexAttention, torch's default tile sizes": ("flex", {}),
        # Where a forward that asks for more shared memory than the card has comes from (an H200 on torch 2.11:
        # 409,600 bytes against 232,448 with both tile sets above): the smallest forward tiles in one stage, and
        # the bias's table held out of the gradient (a score_mod reading a constant).
        "FlexAttention, forward tiles 64 x 32 in one stage": ("flex", {**FLEX_KERNEL_OPTIONS, **SMALL_FORWARD}),
        "FlexAttention, the bias's table without a gradient": ("flex-frozen", FLEX_KERNEL_OPTIONS),
    }
    for arm, (kernel, options) in arms.items():
        if kernel.startswith("flex") and not cuda:
            step.part(arm, status="skipped: no CUDA (FlexAttention has no CPU backward; see test_biased_attention.py)")
            continue
        step.part(arm, status=UNFINISHED)
        try:
            step.part(arm, status="ok", ms=1000 * time_attention(kernel, options, (B, H, T, hs), device))
        except Exception as e:  # noqa: BLE001  (a kernel that does not fit must not take the others with it)
            step.part(arm, status=f"failed: {type(e).__name__}: {one_line(str(e))}")
    if cuda:
        step.part("FlexAttention vs materialised, fp32", status=UNFINISHED)
        step.part("FlexAttention vs materialised, fp32", **exactness(device))
    title = "varlen attention vs padded SDPA, bf16" + ("" if cuda else " (a per-example SDPA stands in for varlen)")
    step.part(title, status=UNFINISHED)
    try:
        step.part(title, **varlen_against_padded(device, dry=step.dry_run))
    except Exception as e:  # noqa: BLE001
        step.part(title, status=f"failed: {type(e).__name__}: {one_line(str(e))}")


def gated_bias(H: int, hs: int, device):
    import torch

    from polyalign.model.position_bias import GatedRelativePositionBias

    torch.manual_seed(0)
    bias = GatedRelativePositionBias(H, hs).to(device)
    with torch.no_grad():
        for p in bias.parameters():
            p.normal_()
    return bias


def attention(kernel: str, options, bias, q, k, v, positions):
    import torch.nn.functional as F

    from polyalign.model.biased_attention import flex_relative_attention

    if kernel == "none":
        return F.scaled_dot_product_attention(q, k, v)
    if kernel == "materialised":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias(q, positions))
    if kernel == "shared":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias(q, None))
    scale = bias.query_scale(q)
    table = bias.relative
    per_bucket = table.per_bucket(q, scale)
    per_bucket = per_bucket.detach() if kernel == "flex-frozen" else per_bucket
    positions = None if kernel == "flex-columns" else positions
    return flex_relative_attention(q, k, v, per_bucket, positions, table.buckets, None, options)


VARLEN_SHAPE, DRY_VARLEN_SHAPE = (64, 12, 512, 64), (2, 2, 32, 8)  # rows, H, T, hs
VARLEN_TOLERANCE = 2e-2
"""Largest difference, relative to the largest value, that two bf16 attentions of the same inputs may show."""


def varlen_against_padded(device, dry: bool) -> dict:
    """Packed rows (examples of random lengths side by side, then padding): torch's variable-length flash attention
    over the real tokens against SDPA over the padded rows under their block-diagonal mask, both bf16, forward and
    backward; the largest difference of the output and of q's, k's and v's gradients relative to the largest value,
    and each one's milliseconds (median of REPEATS after WARMUP)."""
    import statistics

    import torch
    import torch.nn.functional as F

    from polyalign.data.packing import unpadding_indices
    from polyalign.model.packed_attention import packed_attention_mask
    from polyalign.model.unpadded import pad, unpad

    rows, H, T, hs = DRY_VARLEN_SHAPE if dry else VARLEN_SHAPE
    generator = torch.Generator().manual_seed(0)
    example_ids = torch.full((rows, T), -1)
    example = 0
    for r in range(rows):  # examples of 8 to T/2 tokens until the row is (nearly) full
        start = 0
        while True:
            n = int(torch.randint(8, T // 2 + 1, (1,), generator=generator))
            if start + n > T:
                break
            example_ids[r, start : start + n], start, example = example, start + n, example + 1
    found = unpadding_indices({"input_ids": example_ids, "example_ids": example_ids})
    index, cu, longest = found["token_index"].to(device), found["cu_seqlens"].to(device), found["max_seqlen"]
    mask = packed_attention_mask(example_ids.to(device), flex=False)  # (rows, 1, T, T)
    N = len(index)
    q, k, v = (torch.randn(N, H, hs, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    cotangent = torch.randn(N, H, hs, device=device, dtype=torch.bfloat16)

    def padded():
        rows_qkv = (pad(t, index, rows, T).transpose(1, 2) for t in (q, k, v))  # 3 x (rows, H, T, hs)
        return unpad(F.scaled_dot_product_attention(*rows_qkv, attn_mask=mask).transpose(1, 2), index)

    def varlen():
        if device.type != "cuda":  # the dry run: what the kernel computes, one example at a time
            out = []
            for s, e in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
                out.append(F.scaled_dot_product_attention(*(t[s:e].transpose(0, 1) for t in (q, k, v))).transpose(0, 1))
            return torch.cat(out)
        from torch.nn.attention.varlen import varlen_attn

        return varlen_attn(q, k, v, cu, cu, longest, longest)

    results, ms = {}, {}
    for name, fn in (("padded", padded), ("varlen", varlen)):
        seconds = []
        for _ in range(WARMUP + REPEATS):
            for t in (q, k, v):
                t.grad = None
            t0 = time.perf_counter()
            out = fn()
            (out.float() * cotangent.float()).sum().backward()
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - t0)
        ms[name] = 1000 * statistics.median(seconds[WARMUP:])
        results[name] = {"output": out.detach().float(), "q": q.grad.float(), "k": k.grad.float(), "v": v.grad.float()}
    reference, kernel = results["padded"], results["varlen"]
    relative = {n: float((kernel[n] - reference[n]).abs().max() / reference[n].abs().max()) for n in reference}
    worst = max(relative.values())
    status = "ok" if worst <= VARLEN_TOLERANCE else f"failed: relative difference {worst:.2e} (over {VARLEN_TOLERANCE})"
    return {
        "status": status,
        "tokens": N,
        "examples": len(cu) - 1,
        "relative_difference": relative,
        "padded_sdpa_ms": ms["padded"],
        "varlen_ms": ms["varlen"],
    }


def time_attention(kernel: str, options, shape, device) -> float:
    import statistics

    import torch

    B, H, T, hs = shape
    bias = gated_bias(H, hs, device)
    q, k, v = (torch.randn(B, H, T, hs, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    positions = torch.arange(T, device=device).expand(B, T)
    seconds = []
    for i in range(WARMUP + REPEATS):
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = attention(kernel, options, bias, q, k, v, positions)
        out.float().sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= WARMUP:
            seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds)


def exactness(device) -> dict:
    """Largest absolute difference, output and every gradient, compiled FlexAttention against the materialised
    bias in fp32 at a length that is no multiple of the tiles, with a key-padding mask."""
    import torch

    B, H, T, hs = 2, 4, 200, 64
    bias = gated_bias(H, hs, device)
    q, k, v = (torch.randn(B, H, T, hs, device=device, requires_grad=True) for _ in range(3))
    positions = torch.arange(T, device=device).expand(B, T)
    mask = (torch.arange(T, device=device) < torch.tensor([[T], [T - 37]], device=device))[:, None, None, :]
    cotangent = torch.randn(B, H, T, hs, device=device)
    results = []
    for kernel in ("materialised", "flex"):
        bias.relative.kernel = kernel
        bias.zero_grad()
        for t in (q, k, v):
            t.grad = None
        if kernel == "flex":
            out = bias.attend(q, k, v, mask, positions)
        else:
            additive = bias(q, positions).masked_fill(~mask, -torch.inf)
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=additive)
        (out * cotangent).sum().backward()
        grads = {"q": q.grad, "k": k.grad, "v": v.grad} | {n: p.grad for n, p in bias.named_parameters()}
        results.append({"output": out.detach()} | {n: g.clone() for n, g in grads.items()})
    reference, flex = results
    differences = {name: float((flex[name] - reference[name]).abs().max()) for name in reference}
    worst = max(d / max(float(reference[n].abs().max()), 1e-12) for n, d in differences.items())
    status = "ok" if worst < 1e-3 else f"failed: relative difference {worst:.2e} (over 1e-3)"
    return {"status": status, "largest_relative_difference": worst, "max_abs_difference": differences}
