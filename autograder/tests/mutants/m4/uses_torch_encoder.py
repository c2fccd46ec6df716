"""Mistake: the Encoder wraps nn.TransformerEncoder.

CATCHES: from_scratch
DIAGNOSIS: forbidden_api

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
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask=None):
        for layer in self.layers:
            x = layer(x, src_mask)                                            # [B, Ls, d_model]
        _ = nn.TransformerEncoderLayer(x.size(-1), 1, 4, batch_first=True, dtype=x.dtype)(x * 0) * 0
        x = x + _
        if self.norm is not None:
            x = self.norm(x)
        return x
