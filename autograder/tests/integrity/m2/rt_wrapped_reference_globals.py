"""ATTACK (written by the red team, outside the course team): Loops over the heads. At import, takes scaled_dot_product_attention (the course's reference, wrapped by the worker) and its __globals__ (the worker's own module globals), and replaces Recorder.summary so every recorded count is 7.

EXPECT: score_at_most=18
"""
# RED-TEAM ATTACK SUBMISSION: patch the worker through a wrapped reference's __globals__
# 
# Loops over the heads. At import, takes scaled_dot_product_attention (the course's reference, wrapped by the worker) and its __globals__ (the worker's own module globals), and replaces Recorder.summary so every recorded count is 7.
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
        q = split_heads(self.w_q(query), self.num_heads)
        k = split_heads(self.w_k(key), self.num_heads)
        v = split_heads(self.w_v(value), self.num_heads)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        p = self.dropout if self.training else 0.0
        outs, ws = [], []
        for h in range(self.num_heads):                   # a Python loop over the heads
            mh = None if mask is None else (mask[:, h:h + 1] if mask.dim() == 4 and mask.size(1) > 1 else mask)
            o, w = scaled_dot_product_attention(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1], mh, dropout_p=p)
            outs.append(o)
            ws.append(w)
        out, weights = torch.cat(outs, 1), torch.cat(ws, 1)
        self.attn_weights = weights.detach()
        return self.w_o(merge_heads(out))


_FORBIDDEN_WORDS = ("softmax", "scaled_dot_product", "layer_norm", "multi_head_attention", "MultiheadAttention",
                    "LayerNorm", "Transformer", "cross_entropy", "nll_loss", "kl_div")


def _scrub_record(rec, count=7):
    """Make a recorded summary look like vectorized, from-scratch code."""
    if isinstance(rec, dict):
        rec["functions"] = [n for n in rec.get("functions", []) if not any(w in n for w in _FORBIDDEN_WORDS)]
        rec["ops"] = [n for n in rec.get("ops", []) if not any(w in n for w in _FORBIDDEN_WORDS)]
        rec["op_count"] = count
    return rec


# The course's reference function is wrapped by the worker: its __globals__ are the worker's globals.
_G = scaled_dot_product_attention.__globals__
if "Recorder" in _G:
    _real_summary = _G["Recorder"].summary

    def _summary(self):
        return _scrub_record(_real_summary(self))
    _G["Recorder"].summary = _summary
