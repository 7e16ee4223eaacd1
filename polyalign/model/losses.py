"""Loss functions shared by objectives."""

from __future__ import annotations

import torch

IGNORE_INDEX = -100


def pad_rows(x: torch.Tensor, multiple: int = 64, value: float = 0.0) -> torch.Tensor:
    """Pad dim 0 up to a multiple of `multiple`.

    Heads that run only at selected positions (MLM: the masked tokens) see a different row count every batch;
    on CPU each new shape costs new oneDNN primitives and heap fragmentation that the process never gives
    back (memory grew ~70 MB per step). Rounding the count up keeps the shapes to a handful.
    """
    extra = -x.shape[0] % multiple
    if not extra:
        return x
    return torch.cat([x, x.new_full((extra, *x.shape[1:]), value)])


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
        target_logp = torch.empty(N, dtype=torch.float32, device=logits.device)
        for s in range(0, N, chunk):
            logp = torch.log_softmax(logits[s : s + chunk], dim=-1, dtype=torch.float32)  # (chunk, V)
            target_logp[s : s + chunk] = logp.gather(1, safe_target[s : s + chunk, None]).squeeze(1)
        count = valid.sum().clamp(min=1)
        ctx.save_for_backward(logits, safe_target, target_logp, valid, count)
        return -(target_logp * valid).sum() / count

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        logits, target, target_logp, valid, count = ctx.saved_tensors
        N = logits.shape[0]
        scale = grad_output.float() / count
        # scale stays a tensor: .item() would make the host wait for the GPU in every backward
        grad = torch.softmax(logits, dim=-1).mul_(scale)  # (N, V): softmax / count everywhere ...
        rows = torch.arange(N, device=logits.device)
        grad[rows, target] = ((target_logp.exp() - 1.0) * scale).to(grad.dtype)  # ... (p - 1) / count at targets
        grad.masked_fill_(~valid[:, None], 0)  # ignored (padding) rows get no gradient
        return grad, None, None


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """Mean cross-entropy of (N, V) logits against (N,) class indices (IGNORE_INDEX rows excluded), fp32
    internally whatever the dtype."""
    if logits.shape[0] == 0:
        return logits.sum() * 0.0
    return _ChunkedCrossEntropy.apply(logits, target, chunk)
