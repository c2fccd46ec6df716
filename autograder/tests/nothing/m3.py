"""Milestone 3's file that computes nothing: the right names, signatures, shapes and dtypes, and no
right value. A template: test_grader_subjects.py puts the helper `_fake` above it and names the kind of
nothing (zeros, the input or noise)."""
import torch.nn.functional as F
from torch import nn
from multihead import MultiHeadAttention
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))
    def forward(self, x):
        return _fake(x) + 0 * self.weight
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError("activation must be 'relu' or 'gelu'")
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
    def forward(self, x):
        return _fake(x) + 0 * self.linear2(self.linear1(x))
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
    def forward(self, x, src_mask=None):
        return _fake(x) + 0 * self.feed_forward(self.norm2(self.norm1(self.self_attn(x, x, x))))
class DecoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.norm3 = LayerNorm(d_model)
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return _fake(x) + 0 * self.norm3(self.cross_attn(x, memory, memory))
