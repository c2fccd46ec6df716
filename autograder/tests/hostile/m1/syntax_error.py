"""HOSTILE TEST SUBMISSION (grader test corpus): a syntax error.

Safe to run unsandboxed: see autograder/tests/test_batch_corpus.py.
"""
import math

import torch


def softmax(x, dim=-1)
    """Numerically stable softmax of `x` along `dim`.

    Args:
        x: a float tensor of any shape. Entries may be -inf (blocked positions).
        dim: the dimension that sums to 1 afterwards.

    Returns:
        A tensor with the same shape and dtype as `x`. Along `dim`, entries are >= 0 and sum
        to 1, except that a slice made only of -inf gives all zeros (never NaN).

    Stability: softmax(x) == softmax(x - c) for any constant c, so subtract the largest entry
    of each slice before exponentiating; then exp() never overflows, even for logits of 1e4.

    Example:
        >>> softmax(torch.tensor([1.0, 1.0, float("-inf")]))
        tensor([0.5000, 0.5000, 0.0000])
        >>> softmax(torch.tensor([float("-inf"), float("-inf")]))
        tensor([0., 0.])
    """
    x_max = x.amax(dim=dim, keepdim=True)
    # A slice that is entirely -inf has max -inf; shift it by 0 instead so no NaN appears.
    x_max = torch.where(torch.isfinite(x_max), x_max, torch.zeros_like(x_max))
    e = torch.exp(x - x_max)                         # same shape as x, entries in [0, 1]
    total = e.sum(dim=dim, keepdim=True)
    # Fully blocked slices have total 0: divide by 1 there, which leaves their zeros alone.
    return e / torch.where(total > 0, total, torch.ones_like(total))


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, with an optional boolean mask.

    Args:
        q: queries [..., Lq, d_k]
        k: keys    [..., Lk, d_k]
        v: values  [..., Lk, d_v]
           The leading dims "..." (batch, heads, ...) are the same for q, k and v.
        mask: None, or a bool tensor broadcastable to [..., Lq, Lk]. True = may attend.
              For example a padding mask [B, 1, Lk] or a causal mask [Lq, Lk].
        dropout_p: probability of dropping an attention weight (use 0.0 when not training).

    Returns:
        (output, weights):
            output  [..., Lq, d_v], same dtype as q
            weights [..., Lq, Lk], each row sums to 1 over the keys it may attend to; blocked
                    entries are exactly 0. A query row with no allowed key gets all-zero weights,
                    so its output row is all zeros (as in torch.nn.functional.scaled_dot_product_attention).

    The inputs are not modified.

    Example (one query, two keys, the second key blocked):
        q = [[1., 0.]], k = [[1., 0.], [0., 1.]], v = [[10.], [20.]], mask = [[True, False]]
        -> weights [[1., 0.]], output [[10.]]
    """
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)         # [..., Lq, Lk]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))     # blocked keys get -inf
    weights = softmax(scores, dim=-1)                         # [..., Lq, Lk]
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    output = weights @ v                                      # [..., Lq, d_v]
    return output, weights


def padding_mask(tokens, pad_id):
    """Mask that lets every query attend only to real (non-padding) keys.

    Args:
        tokens: int tensor [B, L] of token ids.
        pad_id: the id used for padding.

    Returns:
        bool tensor [B, 1, L]: True where tokens != pad_id. The middle dimension of size 1
        broadcasts over the query positions.

    Example:
        >>> padding_mask(torch.tensor([[5, 7, 0]]), pad_id=0)
        tensor([[[ True,  True, False]]])
    """
    return (tokens != pad_id).unsqueeze(1)                    # [B, 1, L]


def causal_mask(size, device=None):
    """Mask that stops a position from attending to later positions.

    Args:
        size: sequence length L.
        device: where to create the mask (None = the default device).

    Returns:
        bool tensor [L, L]: entry [i, j] is True when j <= i (on and below the diagonal).

    Example:
        >>> causal_mask(3)
        tensor([[ True, False, False],
                [ True,  True, False],
                [ True,  True,  True]])
    """
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()
