"""Written blind from the stub docstrings: Decoder.forward passes the masks to each DecoderLayer in the wrong order, layer(x, memory, tgt_mask, src_mask).

CATCHES: stacks
DIAGNOSIS: stack_masks_swapped

BASE: reference
"""


class Decoder(nn.Module):

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList([
            DecoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
            for _ in range(num_layers)
        ])
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, src_mask)                          # [B, Lt, d_model]
        if self.norm is not None:
            x = self.norm(x)
        return x
