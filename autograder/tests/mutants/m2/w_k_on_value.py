"""Mistake: copy-paste slip: the values go through w_k instead of w_v (w_v is never used).

CATCHES: parity
DIAGNOSIS: value_with_w_k

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
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.attn_weights = None   # [B, H, Lq, Lk] after each forward pass

    def forward(self, query, key, value, mask=None):
        """query [B, Lq, d_model], key/value [B, Lk, d_model], bool mask (True = may attend)."""
        q = split_heads(self.w_q(query), self.num_heads)        # [B, H, Lq, d_k]
        k = split_heads(self.w_k(key), self.num_heads)          # [B, H, Lk, d_k]
        v = split_heads(self.w_k(value), self.num_heads)        # [B, H, Lk, d_k]
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)                            # [B, 1, Lq or 1, Lk]
        p = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)  # [B, H, Lq, d_k]
        self.attn_weights = weights.detach()                    # [B, H, Lq, Lk]
        return self.w_o(merge_heads(out))                       # [B, Lq, d_model]
