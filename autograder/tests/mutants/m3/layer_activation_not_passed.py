"""Mistake: EncoderLayer builds its feed-forward without `activation`, so it always uses relu.

CATCHES: encoder_layer, structure
DIAGNOSIS: activation_not_passed, activation_not_checked

BASE: reference
"""


class EncoderLayer(nn.Module):

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, src_mask=None):
        if self.norm_first:
            n = self.norm1(x)
            x = x + self.dropout1(self.self_attn(n, n, n, src_mask))
            x = x + self.dropout2(self.feed_forward(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, src_mask)))
            x = self.norm2(x + self.dropout2(self.feed_forward(x)))
        return x
