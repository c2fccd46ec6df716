"""Mistake: the decoder passes src_mask to the self-attention and tgt_mask to the cross-attention.

CATCHES: decoder_layer
DIAGNOSIS: decoder_masks_swapped

BASE: reference
"""


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
        self.dropout1 = nn.Dropout(dropout)      # self-attention output
        self.dropout2 = nn.Dropout(dropout)      # cross-attention output
        self.dropout3 = nn.Dropout(dropout)      # feed-forward output

    def forward(self, x, memory, tgt_mask=None, src_mask=None):
        if self.norm_first:
            n = self.norm1(x)
            x = x + self.dropout1(self.self_attn(n, n, n, tgt_mask))                 # [B, Lt, d_model]
            x = x + self.dropout2(self.cross_attn(self.norm2(x), memory, memory, src_mask))
            x = x + self.dropout3(self.feed_forward(self.norm3(x)))
        else:
            x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, tgt_mask)))
            x = self.norm2(x + self.dropout2(self.cross_attn(x, memory, memory, src_mask)))
            x = self.norm3(x + self.dropout3(self.feed_forward(x)))
        return x
