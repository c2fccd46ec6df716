"""Mistake: Decoder builds its layers without `norm_first` (always post-LN layers, with pre-LN's final norm).

CATCHES: stacks
DIAGNOSIS: norm_first_not_passed

BASE: reference
"""


class Decoder(nn.Module):

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList([DecoderLayer(d_model, num_heads, d_ff, dropout, activation)
                                     for _ in range(num_layers)])
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        if self.norm is not None:
            x = self.norm(x)
        return x
