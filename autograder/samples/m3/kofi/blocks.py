"""Milestone 3: Transformer blocks (Kofi's attempt)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

from multihead import MultiHeadAttention


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mu = x.mean(dim=-1, keepdim=True)
        sigma2 = (x - mu).pow(2).mean(dim=-1, keepdim=True)
        return self.weight * (x - mu) / torch.sqrt(sigma2 + self.eps) + self.bias


def gelu(x):
    # GELU as in the BERT / GPT code
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        assert activation in ["relu", "gelu"], "activation must be relu or gelu"
        self.activation = F.relu if activation == "relu" else gelu
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, src_mask=None):
        if self.norm_first:
            y = self.norm1(x)
            x = x + self.dropout(self.self_attn(y, y, y, src_mask))
            x = x + self.dropout(self.feed_forward(self.norm2(x)))
            return x
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, src_mask)))
        x = self.norm2(x + self.dropout(self.feed_forward(x)))
        return x


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        if self.norm_first:
            y = self.norm1(x)
            x = x + self.dropout(self.self_attn(y, y, y, tgt_mask))
            y = self.norm2(x)
            x = x + self.dropout(self.cross_attn(y, memory, memory, src_mask))
            x = x + self.dropout(self.feed_forward(self.norm3(x)))
            return x
        # post-LN: residual, then dropout, then norm
        x = self.norm1(self.dropout(x + self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(self.dropout(x + self.cross_attn(x, memory, memory, src_mask)))
        x = self.norm3(self.dropout(x + self.feed_forward(x)))
        return x
