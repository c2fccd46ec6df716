"""Mistake: EncoderLayer builds its feed-forward without the layer's dropout (FeedForward keeps its default 0.0).

CATCHES: dropout
DIAGNOSIS: ffn_dropout_not_passed

BASE: reference
"""


class EncoderLayer(nn.Module):

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        # the feed-forward network has its own dropout default
        self.feed_forward = FeedForward(d_model, d_ff, activation=activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.residual_dropout = nn.Dropout(dropout)

    def forward(self, x, src_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.residual_dropout(self.self_attn(h, h, h, src_mask))
            x = x + self.residual_dropout(self.feed_forward(self.norm2(x)))
        else:
            x = self.norm1(x + self.residual_dropout(self.self_attn(x, x, x, src_mask)))
            x = self.norm2(x + self.residual_dropout(self.feed_forward(x)))
        return x
