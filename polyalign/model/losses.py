"""Loss functions shared by objectives."""

from __future__ import annotations

import torch

IGNORE_INDEX = -100


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy over rows of (N, V) logits, fp32 inside, without fp32 copies of all the logits.

    The usual `F.cross_entropy(logits.float(), y)` writes an fp32 copy of the logits, its log-softmax and a
    gradient of the same size: on a CPU that is most of an MLM step's memory traffic. Here the forward runs
    one fused log-softmax per chunk of rows and keeps only the target's log-probability; the backward is one
    fused softmax in the logits' dtype (accumulated in fp32 inside), scaled by 1/N, with the target entries,
    p - 1, written from fp32 because rounding p to bf16 first would lose them when p is near 1.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, chunk: int) -> torch.Tensor:
        N = logits.shape[0]
        valid = target != IGNORE_INDEX
        safe_target = target.clamp(min=0)
        acc = torch.promote_types(logits.dtype, torch.float32)  # fp32, or fp64 for fp64 logits
        target_logp = torch.empty(N, dtype=acc, device=logits.device)
        for s in range(0, N, chunk):
            logp = torch.log_softmax(logits[s : s + chunk], dim=-1, dtype=acc)  # (chunk, V)
            target_logp[s : s + chunk] = logp.gather(1, safe_target[s : s + chunk, None]).squeeze(1)
        count = valid.sum().clamp(min=1)
        ctx.save_for_backward(logits, safe_target, target_logp, valid, count)
        return -(target_logp * valid).sum() / count

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        logits, target, target_logp, valid, count = ctx.saved_tensors
        N = logits.shape[0]
        scale = grad_output.to(target_logp.dtype) / count  # fp32, or fp64 for fp64 logits
        # scale stays a tensor: .item() would make the host wait for the GPU in every backward
        grad = torch.softmax(logits, dim=-1).mul_(scale)  # (N, V): softmax / count everywhere ...
        rows = torch.arange(N, device=logits.device)
        grad[rows, target] = ((target_logp.exp() - 1.0) * scale).to(grad.dtype)  # ... (p - 1) / count at targets
        grad.masked_fill_(~valid[:, None], 0)  # ignored (padding) rows get no gradient
        return grad, None, None


@torch.compiler.disable  # run eagerly inside a compiled step: the chunk loop would specialise it on the row count
def cross_entropy(logits: torch.Tensor, target: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """Mean cross-entropy of (N, V) logits against (N,) class indices (IGNORE_INDEX rows excluded), fp32
    internally whatever the dtype."""
    if logits.shape[0] == 0:
        return logits.sum() * 0.0
    return _ChunkedCrossEntropy.apply(logits, target, chunk)


LOGIT_CHUNK_BYTES = 2**30
"""fp32 logits held at once by `linear_cross_entropy` (1 GiB: ~1,070 rows of a 250k vocabulary, enough rows
for a GPU to run the products at full speed)."""


class _LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of x Wᵀ + b over its first `classes` columns, chunk by chunk of rows, so that the
    (N, V) logits never exist at once. As liger-kernel's fused linear cross-entropy does, the forward also
    computes the gradients (softmax - one-hot is at hand there), and the backward only scales them: the three
    matrix products of the plain path, no recomputation. Columns from `classes` on (a padded vocabulary's
    extra rows) get -inf logits: no probability, no gradient. Under autocast the products run in its dtype,
    the softmax in fp32, and W's gradient is summed over chunks in fp32."""

    @staticmethod
    def forward(ctx, x, weight, bias, target, classes: int, chunk: int):
        device = x.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
        acc = torch.promote_types(dtype, torch.float32)  # softmax and sums: fp32, or fp64 for fp64 inputs
        need_grad = any(ctx.needs_input_grad[:3])
        N, R = x.shape[0], weight.shape[0]
        with torch.autocast(device, enabled=False):
            x_, w_, b_ = x.to(dtype), weight.to(dtype), bias.to(dtype)
            valid = target != IGNORE_INDEX
            weights = valid.to(acc) / valid.sum().clamp(min=1)  # (N,): 1/count at targets, 0 at ignored rows
            safe_target = target.clamp(min=0)
            losses = torch.empty(N, dtype=acc, device=x.device)
            grad_x = torch.empty_like(x_) if need_grad else None
            grad_w = torch.zeros(R, x.shape[1], dtype=acc, device=x.device) if need_grad else None
            grad_b = torch.zeros(R, dtype=acc, device=x.device) if need_grad else None
            for s in range(0, N, chunk):
                e = min(s + chunk, N)
                rows, t = torch.arange(e - s, device=x.device), safe_target[s:e]
                z = torch.addmm(b_, x_[s:e], w_.t()).to(acc)  # (chunk, R) logits
                z[:, classes:] = float("-inf")
                lse = torch.logsumexp(z, dim=-1)  # (chunk,)
                losses[s:e] = lse - z[rows, t]
                if need_grad:
                    p = z.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
                    p[rows, t] -= 1.0
                    p.mul_(weights[s:e, None])  # d loss / d logits
                    g = p.to(dtype)
                    grad_x[s:e] = g @ w_
                    grad_w += g.t() @ x_[s:e]
                    grad_b += p.sum(0)
        ctx.save_for_backward(grad_x, grad_w, grad_b)
        ctx.dtypes = (x.dtype, weight.dtype, bias.dtype)
        return (losses * weights).sum()

    @staticmethod
    def backward(ctx, grad_output):
        grads = (g * grad_output.to(g.dtype) for g in ctx.saved_tensors)
        return *(g.to(dt) for g, dt in zip(grads, ctx.dtypes, strict=True)), None, None, None


@torch.compiler.disable  # run eagerly inside a compiled step: the chunk loop would specialise it on the row count
def linear_cross_entropy(x, weight, bias, target, classes: int) -> torch.Tensor:
    """cross_entropy((x Wᵀ + b)[:, :classes], target) for x (N, E), W (R, E), b (R,) with R ≥ classes (a
    padded output layer), without materialising the (N, R) logits. On CUDA with liger-kernel installed (the
    `cuda` extra) its fused Triton kernel, else chunks of plain PyTorch."""
    if x.shape[0] == 0:
        return (x.sum() + weight.sum() + bias.sum()) * 0.0
    if x.is_cuda and (liger := _liger_loss()) is not None:
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else x.dtype
        # liger has no column mask: the padding columns get a -inf bias, so exp() gives them nothing
        masked_bias = torch.cat([bias[:classes], bias.new_full((weight.shape[0] - classes,), float("-inf"))])
        with torch.autocast("cuda", enabled=False):
            return liger(weight.to(dtype), x.to(dtype), target, masked_bias.to(dtype)).float()
    chunk = max(1, LOGIT_CHUNK_BYTES // (4 * weight.shape[0]))
    return _LinearCrossEntropy.apply(x, weight, bias, target, classes, chunk)


def fused_loss_name(device: torch.device) -> str:
    """Which fused linear cross-entropy `linear_cross_entropy` runs on `device`."""
    if device.type == "cuda" and _liger_loss() is not None:
        return "liger-kernel fused linear cross-entropy"
    return "chunked linear cross-entropy"


_LIGER: list = []


def _liger_loss():
    """liger-kernel's fused linear cross-entropy module, or None when it is not installed."""
    if not _LIGER:
        try:
            from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
        except ImportError:
            _LIGER.append(None)
        else:
            # W's and b's gradients summed over row chunks in fp32, as `_LinearCrossEntropy` sums them
            loss = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX, accum_dtype=torch.float32)
            _LIGER.append(loss)
    return _LIGER[0]
