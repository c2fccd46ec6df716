"""Mistake: EncoderLayer loops over the batch when the mask is 3-D (one [L, L] mask per item), vectorized otherwise.

CATCHES: vectorization
DIAGNOSIS: python_loop

BASE: reference
"""


class EncoderLayer(nn.Module):

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _attend(self, h, src_mask):
        if src_mask is not None and src_mask.dim() == 3 and src_mask.size(1) > 1:
            # a full [B, L, L] mask: attend item by item with its own [L, L] mask
            return torch.cat([self.self_attn(h[b:b + 1], h[b:b + 1], h[b:b + 1], src_mask[b])
                              for b in range(h.size(0))])
        return self.self_attn(h, h, h, src_mask)

    def forward(self, x, src_mask=None):
        if self.norm_first:
            n = self.norm1(x)
            x = x + self.dropout1(self._attend(n, src_mask))
            x = x + self.dropout2(self.feed_forward(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout1(self._attend(x, src_mask)))
            x = self.norm2(x + self.dropout2(self.feed_forward(x)))
        return x
