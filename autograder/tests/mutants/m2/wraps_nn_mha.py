"""Mistake: the class wraps torch's nn.MultiheadAttention (self.mha) instead of building the
four projections w_q, w_k, w_v, w_o and calling milestone 1's attention.

CATCHES: shapes, parity, head_weights, dropout, gradients, vectorization, from_scratch, init_errors
DIAGNOSIS: parameter_names

BASE: reference
"""


class MultiHeadAttention(nn.Module):
    """Multi-head attention with four projections: w_q, w_k, w_v (inputs) and w_o (output)."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads = num_heads
        self.dropout = dropout
        self.mha = nn.MultiheadAttention(d_model, num_heads, dropout=dropout, bias=bias, batch_first=True)
        self.attn_weights = None   # [B, H, Lq, Lk] after each forward pass

    def forward(self, query, key, value, mask=None):
        """query [B, Lq, d_model], key/value [B, Lk, d_model], bool mask (True = may attend)."""
        attn_mask = None
        if mask is not None:   # PyTorch wants True = blocked, [B*H, Lq, Lk]
            B, Lq, Lk = query.size(0), query.size(1), key.size(1)
            attn_mask = (~mask.expand(B, Lq, Lk)).repeat_interleave(self.num_heads, dim=0)
        out, weights = self.mha(query, key, value, attn_mask=attn_mask, need_weights=True,
                                average_attn_weights=False)
        self.attn_weights = weights.detach()                    # [B, H, Lq, Lk]
        return out
