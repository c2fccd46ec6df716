"""Mistake: the encoder has a final norm in post-LN too.

CATCHES: stacks
DIAGNOSIS: final_norm_in_post_ln

BASE: reference
"""


class Encoder(nn.Module):
    """A stack of `num_layers` EncoderLayers, run in order.

    Args:
        num_layers: number of layers N.
        d_model, num_heads, d_ff, dropout, activation, norm_first: passed to every EncoderLayer.

    Submodules:
        layers: nn.ModuleList of num_layers EncoderLayers, each its own object with its own weights
            (not the same layer repeated, not a plain Python list).
        norm: a final LayerNorm(d_model) (the one of blocks.py) when norm_first is True, else None.
            Pre-LN layers leave the residual stream unnormalised, so the stack normalises it once
            at the end; post-LN layers already end with a norm.
    """

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList([
            EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
            for _ in range(num_layers)
        ])
        self.norm = LayerNorm(d_model)

    def forward(self, x, src_mask=None):
        """x [B, Ls, d_model], src_mask None or bool broadcastable to [B, Ls, Ls] -> [B, Ls, d_model]."""
        for layer in self.layers:
            x = layer(x, src_mask)                                            # [B, Ls, d_model]
        if self.norm is not None:
            x = self.norm(x)
        return x
