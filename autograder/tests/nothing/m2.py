"""Milestone 2's file that computes nothing: the right names, signatures, shapes and dtypes, and no
right value. A template: test_grader_subjects.py puts the helper `_fake` above it and names the kind of
nothing (zeros, the input or noise)."""
from torch import nn
def split_heads(x, num_heads):
    B, L, d = x.shape
    return _fake(x, (B, num_heads, L, d // num_heads))
def merge_heads(x):
    B, H, L, d_k = x.shape
    return _fake(x, (B, L, H * d_k))
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))
        self.attn_weights = None
    def forward(self, query, key, value, mask=None):
        B, Lq, _ = query.shape
        self.attn_weights = _fake(query, (B, self.num_heads, Lq, key.shape[1])).detach()
        return _fake(query) + 0 * self.w_o(query)
