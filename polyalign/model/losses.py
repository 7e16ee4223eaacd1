"""Loss functions shared by objectives."""

from __future__ import annotations

import torch


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
        lse = torch.empty(N, dtype=torch.float32, device=logits.device)
        for s in range(0, N, chunk):
            lse[s : s + chunk] = torch.logsumexp(logits[s : s + chunk].float(), dim=-1)
        picked = logits.gather(1, target[:, None]).squeeze(1).float()
        ctx.save_for_backward(logits, target, lse)
        ctx.chunk = chunk
        return (lse - picked).mean()

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        logits, target, lse = ctx.saved_tensors
        N = logits.shape[0]
        grad = torch.empty_like(logits)
        scale = grad_output.float() / N
        for s in range(0, N, ctx.chunk):
            p = torch.exp(logits[s : s + ctx.chunk].float() - lse[s : s + ctx.chunk, None])  # softmax rows
            p.scatter_add_(1, target[s : s + ctx.chunk, None], torch.full_like(p[:, :1], -1.0))
            grad[s : s + ctx.chunk] = (p * scale).to(grad.dtype)
        return grad, None, None


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """Mean cross-entropy of (N, V) logits against (N,) class indices, fp32 internally whatever the dtype."""
    if logits.shape[0] == 0:
        return logits.sum() * 0.0
    return _ChunkedCrossEntropy.apply(logits, target, chunk)
