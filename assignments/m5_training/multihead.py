"""Milestone 2: multi-head attention.

Several attention "heads" run side by side, each on its own d_k = d_model / num_heads slice of
the projected queries, keys and values, so each head can learn a different pattern.

Shapes: B = batch, L = sequence length, H = num_heads, d_k = d_model // H.
Masks are boolean, True = may attend (as in milestone 1).
"""
import torch
from torch import nn

from attention import scaled_dot_product_attention


def split_heads(x, num_heads):
    """[B, L, d_model] -> [B, H, L, d_k]: head h holds features h*d_k : (h+1)*d_k.

    Example: with d_model = 4 and num_heads = 2, the features [a, b, c, d] of one position
    go to head 0 as [a, b] and to head 1 as [c, d].
    """
    B, L, d_model = x.shape
    d_k = d_model // num_heads
    return x.reshape(B, L, num_heads, d_k).transpose(1, 2)   # [B, H, L, d_k]


def merge_heads(x):
    """[B, H, L, d_k] -> [B, L, H*d_k], the inverse of split_heads."""
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d_k)          # [B, L, d_model]


class MultiHeadAttention(nn.Module):
    """Multi-head attention with four projections: w_q, w_k, w_v (inputs) and w_o (output).

    Args:
        d_model: model width; must be divisible by num_heads.
        num_heads: number of heads H; each works on d_k = d_model // H features.
        dropout: dropout probability on the attention weights, applied in training mode only.
        bias: whether the four nn.Linear(d_model, d_model) projections have a bias.

    Raises:
        ValueError: if d_model is not divisible by num_heads; the message gives both numbers.
    """

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.dropout = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.attn_weights = None   # [B, H, Lq, Lk] after each forward pass, for visualisation

    def forward(self, query, key, value, mask=None):
        """Attend from `query` to `key`/`value`.

        Args:
            query: [B, Lq, d_model]
            key:   [B, Lk, d_model]
            value: [B, Lk, d_model]
            mask: None or bool, True = may attend, broadcastable to [B, Lq, Lk]: a padding mask
                  [B, 1, Lk], a causal mask [Lq, Lk], or a combined mask [B, Lq, Lk].

        Returns:
            [B, Lq, d_model]. Also sets self.attn_weights to the detached weights [B, H, Lq, Lk] that the
            output was computed with (after dropout, in training mode).
        """
        q = split_heads(self.w_q(query), self.num_heads)        # [B, H, Lq, d_k]
        k = split_heads(self.w_k(key), self.num_heads)          # [B, H, Lk, d_k]
        v = split_heads(self.w_v(value), self.num_heads)        # [B, H, Lk, d_k]
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(-3)                           # [B, 1, Lq or 1, Lk]: same for every head
        p = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)  # [B, H, Lq, d_k]
        self.attn_weights = weights.detach()                    # [B, H, Lq, Lk]
        return self.w_o(merge_heads(out))                       # [B, Lq, d_model]
