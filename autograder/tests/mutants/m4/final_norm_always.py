"""Mistake: the encoder has a final norm in post-LN too.

CATCHES: stacks
DIAGNOSIS: final_norm_in_post_ln

BASE: reference
"""


class Encoder(nn.Module):

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList([
            EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
            for _ in range(num_layers)
        ])
        self.norm = LayerNorm(d_model)

    def forward(self, x, src_mask=None):
        for layer in self.layers:
            x = layer(x, src_mask)                                            # [B, Ls, d_model]
        if self.norm is not None:
            x = self.norm(x)
        return x
