"""Mistake: the decoder adds a causal mask itself when tgt_mask is None.

CATCHES: decoder_layer, dropout, structure, vectorization, from_scratch
DIAGNOSIS: tgt_mask_added

BASE: reference
"""


class DecoderLayer(nn.Module):
    """One decoder layer: masked self-attention, cross-attention to the encoder output, feed-forward.

    Args: as EncoderLayer (one `dropout` for the attention weights of both attentions, inside the
        feed-forward, and on each of the three sub-layer outputs before its residual add).

    Submodules and attributes:
        self_attn:    MultiHeadAttention(d_model, num_heads, dropout), over the decoder positions
        cross_attn:   MultiHeadAttention(d_model, num_heads, dropout): queries from the decoder,
                      keys and values from `memory` (the encoder output)
        feed_forward: FeedForward(d_model, d_ff, dropout, activation)
        norm1, norm2, norm3: LayerNorm(d_model) for self-attention, cross-attention, feed-forward
        norm_first:   the bool given to the constructor

    Computation ("drop" = dropout, training mode only):
        post-LN:  x = norm1(x + drop(self_attn(x, x, x, tgt_mask)))
                  x = norm2(x + drop(cross_attn(x, memory, memory, src_mask)))
                  x = norm3(x + drop(feed_forward(x)))
        pre-LN:   n = norm1(x);  x = x + drop(self_attn(n, n, n, tgt_mask))
                  x = x + drop(cross_attn(norm2(x), memory, memory, src_mask))
                  x = x + drop(feed_forward(norm3(x)))
    `memory` is used as it is: never normalised here.

    The result matches nn.TransformerDecoderLayer(..., batch_first=True, norm_first=norm_first)
    given the same weights (PyTorch calls the cross-attention `multihead_attn`).
    """

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

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        """Run the layer.

        Args:
            x: decoder input [B, Lt, d_model]
            memory: encoder output [B, Ls, d_model]
            src_mask: None or bool, broadcastable to [B, Lt, Ls]: which source positions the
                cross-attention may look at (typically the source padding mask [B, 1, Ls]).
            tgt_mask: None or bool, broadcastable to [B, Lt, Lt]: which target positions the
                self-attention may look at (typically causal AND target padding, [B, Lt, Lt]).
                None means no mask at all: nothing causal is added for you.

        Returns:
            [B, Lt, d_model]. The inputs are not modified.
        """
        if tgt_mask is None:
            L = x.size(1)
            tgt_mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
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
