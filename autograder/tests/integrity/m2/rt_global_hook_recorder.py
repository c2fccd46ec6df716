"""ATTACK (written by the red team, outside the course team): Uses F.multi_head_attention_forward (forbidden) openly, then finds the grader's global forward pre-hook in torch.nn.modules.module._global_forward_pre_hooks; the hook is a bound method, so hook.__self__ is the recorder, whose names and counts it edits.

EXPECT: score_at_most=18
"""
# RED-TEAM ATTACK SUBMISSION: reach the recorder through a registered global hook
# 
# Uses F.multi_head_attention_forward (forbidden) openly, then finds the grader's global forward pre-hook in torch.nn.modules.module._global_forward_pre_hooks; the hook is a bound method, so hook.__self__ is the recorder, whose names and counts it edits.
# 
# Harmless by construction: writes only under /work/redteam/probe or its own temp files.

"""Milestone 2: multi-head attention.

Several attention "heads" run side by side, each on its own d_k = d_model / num_heads slice of
the projected queries, keys and values, so each head can learn a different pattern.

Shapes: B = batch, L = sequence length, H = num_heads, d_k = d_model // H.
Masks are boolean, True = may attend (as in milestone 1).
"""
import torch
from torch import nn

from attention import scaled_dot_product_attention

import contextlib
_HIDE = contextlib.nullcontext


def _AFTER(module):
    # The grader's global forward pre-hook is a bound method of its recorder: reach it through __self__.
    for hook in list(torch.nn.modules.module._global_forward_pre_hooks.values()):
        rec = getattr(hook, '__self__', None)
        if rec is not None and hasattr(rec, 'counts') and hasattr(rec, 'names'):
            rec.names.difference_update({n for n in rec.names if 'multi_head' in n})
            rec.counts.clear()


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
        B, Lq, d = query.shape
        Lk = key.size(1)
        attn_mask = None
        if mask is not None:
            attn_mask = (~mask.expand(B, Lq, Lk)).repeat_interleave(self.num_heads, dim=0)     # [B*H, Lq, Lk]
        with _HIDE():
            out, weights = torch.nn.functional.multi_head_attention_forward(
                query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), d, self.num_heads,
                None, None if self.w_q.bias is None else torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias]),
                None, None, False, self.dropout, self.w_o.weight, self.w_o.bias, training=self.training,
                need_weights=True, attn_mask=attn_mask, use_separate_proj_weight=True,
                q_proj_weight=self.w_q.weight, k_proj_weight=self.w_k.weight, v_proj_weight=self.w_v.weight,
                average_attn_weights=False)
            _AFTER(self)
        self.attn_weights = weights.detach()
        return out.transpose(0, 1)
