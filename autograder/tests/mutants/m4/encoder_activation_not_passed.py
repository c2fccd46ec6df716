"""Mistake: Encoder builds its layers without `activation` (they keep EncoderLayer's default relu).

CATCHES: stacks
DIAGNOSIS: stack_activation_not_passed

BASE: reference
"""


class Encoder(nn.Module):

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first=norm_first)
                                     for _ in range(num_layers)])
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask=None):
        for layer in self.layers:
            x = layer(x, src_mask)
        if self.norm is not None:
            x = self.norm(x)
        return x
