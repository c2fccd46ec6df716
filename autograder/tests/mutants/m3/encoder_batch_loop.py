"""Mistake: the encoder layer runs each batch item separately in a Python loop.

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
        self.dropout1 = nn.Dropout(dropout)      # on the attention sub-layer's output
        self.dropout2 = nn.Dropout(dropout)      # on the feed-forward sub-layer's output

    def forward(self, x, src_mask=None):
        if x.size(0) > 1:
            outs = []
            for b in range(x.size(0)):
                m = None if src_mask is None else (src_mask[b:b + 1] if src_mask.dim() == 3 else src_mask)
                outs.append(self.forward(x[b:b + 1], m))
            return torch.cat(outs)
        """Run the layer.

        Args:
            x: [B, L, d_model]
            src_mask: None or bool, True = may attend, broadcastable to [B, L, L]; typically the
                padding mask [B, 1, L] of the source tokens.

        Returns:
            [B, L, d_model]. The input is not modified.
        """
        if self.norm_first:
            n = self.norm1(x)
            x = x + self.dropout1(self.self_attn(n, n, n, src_mask))          # [B, L, d_model]
            x = x + self.dropout2(self.feed_forward(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, src_mask)))
            x = self.norm2(x + self.dropout2(self.feed_forward(x)))
        return x
