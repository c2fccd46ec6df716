"""Mistake: the encoder stack repeats one layer object ([layer] * N).

CATCHES: stacks
DIAGNOSIS: shared_submodule

BASE: reference
"""


class Encoder(nn.Module):

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        layer = EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.layers = nn.ModuleList([layer] * num_layers)
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask=None):
        for layer in self.layers:
            x = layer(x, src_mask)                                            # [B, Ls, d_model]
        if self.norm is not None:
            x = self.norm(x)
        return x
