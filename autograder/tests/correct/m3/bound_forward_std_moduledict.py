"""Correct: LayerNorm from x.std(unbiased=False) (eps added to its square, inside the root); the
activation is an nn.GELU(approximate='none') or nn.ReLU module held in an nn.ModuleDict of
dropouts-and-activation; the pre/post choice is made once in __init__ by binding one of two
methods; the decoder layer reuses a small residual helper method."""
import torch
from torch import nn

from multihead import MultiHeadAttention


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        std = x.std(dim=-1, unbiased=False, keepdim=True)
        x_hat = (x - x.mean(dim=-1, keepdim=True)) / torch.sqrt(std ** 2 + self.eps)
        return x_hat.mul(self.weight).add(self.bias)


class FeedForward(nn.Module):
    ALLOWED = ("relu", "gelu")

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation not in self.ALLOWED:
            raise ValueError(f"activation {activation!r} not allowed (allowed: {', '.join(self.ALLOWED)})")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.parts = nn.ModuleDict({
            "act": nn.GELU(approximate="none") if activation == "gelu" else nn.ReLU(),
            "drop": nn.Dropout(dropout),
        })

    def forward(self, x):
        h = self.parts["act"](self.linear1(x))
        return self.linear2(self.parts["drop"](h))


class _Residual(nn.Module):
    """Base of both layers: a residual step in the chosen normalisation order."""

    def _setup(self, norm_first):
        self.norm_first = norm_first
        self._step = self._pre_step if norm_first else self._post_step

    @staticmethod
    def _pre_step(x, norm, fn, drop):
        return x + drop(fn(norm(x)))

    @staticmethod
    def _post_step(x, norm, fn, drop):
        return norm(x + drop(fn(x)))


class EncoderLayer(_Residual):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout_a = nn.Dropout(dropout)
        self.dropout_b = nn.Dropout(dropout)
        self._setup(norm_first)

    def forward(self, x, src_mask=None):
        def attend(h):
            return self.self_attn(h, h, h, src_mask)
        y = self._step(x, self.norm1, attend, self.dropout_a)
        return self._step(y, self.norm2, self.feed_forward, self.dropout_b)


class DecoderLayer(_Residual):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout_a = nn.Dropout(dropout)
        self.dropout_b = nn.Dropout(dropout)
        self.dropout_c = nn.Dropout(dropout)
        self._setup(norm_first)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        def attend_self(h):
            return self.self_attn(h, h, h, tgt_mask)

        def attend_memory(h):
            return self.cross_attn(h, memory, memory, src_mask)
        y = self._step(x, self.norm1, attend_self, self.dropout_a)
        y = self._step(y, self.norm2, attend_memory, self.dropout_b)
        return self._step(y, self.norm3, self.feed_forward, self.dropout_c)
