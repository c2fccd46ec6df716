"""Mistake: the encoder's self-attention is built without the layer's dropout.

CATCHES: dropout
DIAGNOSIS: attention_dropout_missing

BASE: reference
"""


class EncoderLayer(nn.Module):
    """One encoder layer: self-attention, then feed-forward, each with a residual connection.

    Args:
        d_model, num_heads: as in MultiHeadAttention.
        d_ff, activation: as in FeedForward.
        dropout: the one dropout probability used everywhere in the layer (training mode only):
            on the attention weights (inside self_attn), on the hidden activations of the
            feed-forward (inside feed_forward), and on the output of each sub-layer before it is
            added to the residual (the paper's section 5.4).
        norm_first: False = post-LN (the paper), True = pre-LN. Fixed when the layer is built.

    Submodules and attributes (the grader copies weights into them by these names):
        self_attn:    MultiHeadAttention(d_model, num_heads, dropout)
        feed_forward: FeedForward(d_model, d_ff, dropout, activation)
        norm1, norm2: LayerNorm(d_model), for the attention and the feed-forward sub-layer
        norm_first:   the bool given to the constructor
    Name the residual dropouts as you like (nn.Dropout modules or F.dropout calls both work).

    Computation ("drop" = dropout with probability `dropout`, training mode only):
        post-LN:  x = norm1(x + drop(self_attn(x, x, x, src_mask)))
                  x = norm2(x + drop(feed_forward(x)))
        pre-LN:   n = norm1(x);  x = x + drop(self_attn(n, n, n, src_mask))
                  x = x + drop(feed_forward(norm2(x)))
    In pre-LN the residual stream x itself is never normalised inside the layer (the final
    LayerNorm of the encoder stack does that, in milestone 4).

    The result matches nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout, activation,
    batch_first=True, norm_first=norm_first) given the same weights.
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)      # on the attention sub-layer's output
        self.dropout2 = nn.Dropout(dropout)      # on the feed-forward sub-layer's output

    def forward(self, x, src_mask=None):
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
