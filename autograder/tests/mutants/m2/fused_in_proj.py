"""Mistake: one fused nn.Linear(d_model, 3*d_model) named in_proj (chunked into q, k, v) and an
output projection named out_proj, instead of the four required projections w_q, w_k, w_v, w_o.

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
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.attn_weights = None   # [B, H, Lq, Lk] after each forward pass

    def forward(self, query, key, value, mask=None):
        """query [B, Lq, d_model], key/value [B, Lk, d_model], bool mask (True = may attend)."""
        d = query.size(-1)
        w, b = self.in_proj.weight, self.in_proj.bias
        bq, bk, bv = (None, None, None) if b is None else (b[:d], b[d:2 * d], b[2 * d:])
        q = split_heads(nn.functional.linear(query, w[:d], bq), self.num_heads)
        k = split_heads(nn.functional.linear(key, w[d:2 * d], bk), self.num_heads)
        v = split_heads(nn.functional.linear(value, w[2 * d:], bv), self.num_heads)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)                            # [B, 1, Lq or 1, Lk]
        p = self.dropout if self.training else 0.0
        out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)  # [B, H, Lq, d_k]
        self.attn_weights = weights.detach()                    # [B, H, Lq, Lk]
        return self.out_proj(merge_heads(out))                   # [B, Lq, d_model]
