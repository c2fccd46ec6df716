"""Milestone 3: Transformer blocks (Sven's attempt)."""
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
        mean = torch.mean(x, dim=-1, keepdim=True)
        var = torch.mean((x - mean) ** 2, dim=-1, keepdim=True)
        out = (x - mean) / torch.sqrt(var + self.eps)
        return out * self.weight + self.bias


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation}")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        h = self.linear1(x)
        if self.activation == "relu":
            h = F.relu(h)
        else:
            h = F.gelu(h)
        return self.linear2(self.dropout(h))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.drop1 = nn.Dropout(dropout)
        self.drop2 = nn.Dropout(dropout)

    def _one(self, x, mask):
        # one sentence at a time, so each sentence only sees its own mask
        if self.norm_first:
            n = self.norm1(x)
            x = x + self.drop1(self.self_attn(n, n, n, mask))
            return x + self.drop2(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self.drop2(self.feed_forward(x)))

    def forward(self, x, src_mask=None):
        outputs = []
        for b in range(x.shape[0]):
            mask = None
            if src_mask is not None:
                mask = src_mask[b if src_mask.dim() == 3 and src_mask.shape[0] > 1 else 0].unsqueeze(0) \
                    if src_mask.dim() == 3 else src_mask
            outputs.append(self._one(x[b:b + 1], mask))
        return torch.cat(outputs, dim=0)


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
        self.drop1 = nn.Dropout(dropout)
        self.drop2 = nn.Dropout(dropout)
        self.drop3 = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        # TODO pre-LN for the decoder (the encoder has it)
        x = self.norm1(x + self.drop1(self.self_attn(x, x, x, tgt_mask)))
        x = self.norm2(x + self.drop2(self.cross_attn(x, memory, memory, src_mask)))
        x = self.norm3(x + self.drop3(self.feed_forward(x)))
        return x
