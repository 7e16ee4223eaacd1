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
    """Mean cross-entropy over rows of (N, V) logits, computed in fp32 one chunk of rows at a time.

    The usual `F.cross_entropy(logits.float(), y)` writes an fp32 copy of the logits, its log-softmax and a
    gradient of the same size: on a CPU that is most of an MLM step's memory traffic. Here the forward keeps
    only the per-row log-sum-exp, and the backward writes the gradient (softmax - one-hot) straight in the
    logits' dtype.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, chunk: int) -> torch.Tensor:
        N = logits.shape[0]
        valid = target != IGNORE_INDEX
        safe_target = target.clamp(min=0)
        lse = torch.empty(N, dtype=torch.float32, device=logits.device)
        for s in range(0, N, chunk):
            lse[s : s + chunk] = torch.logsumexp(logits[s : s + chunk].float(), dim=-1)
        picked = logits.gather(1, safe_target[:, None]).squeeze(1).float()
        count = valid.sum().clamp(min=1)
        ctx.save_for_backward(logits, safe_target, lse, valid, count)
        ctx.chunk = chunk
        return ((lse - picked) * valid).sum() / count

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        logits, target, lse, valid, count = ctx.saved_tensors
        N = logits.shape[0]
        grad = torch.empty_like(logits)
        scale = (grad_output.float() / count) * valid  # (N,): ignored rows get no gradient
        for s in range(0, N, ctx.chunk):
            p = torch.exp(logits[s : s + ctx.chunk].float() - lse[s : s + ctx.chunk, None])  # softmax rows
            p.scatter_add_(1, target[s : s + ctx.chunk, None], torch.full_like(p[:, :1], -1.0))
            grad[s : s + ctx.chunk] = (p * scale[s : s + ctx.chunk, None]).to(grad.dtype)
        return grad, None, None


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """Mean cross-entropy of (N, V) logits against (N,) class indices (IGNORE_INDEX rows excluded), fp32
    internally whatever the dtype."""
    if logits.shape[0] == 0:
        return logits.sum() * 0.0
    return _ChunkedCrossEntropy.apply(logits, target, chunk)
