"""Mistake: Decoder runs each batch item on its own when tgt_mask is 3-D (one [Lt, Lt] mask per item), vectorized otherwise.

CATCHES: vectorization
DIAGNOSIS: python_loop

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

    def _run(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return x if self.norm is None else self.norm(x)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        if tgt_mask is not None and tgt_mask.dim() == 3 and tgt_mask.size(1) > 1:
            # per-sentence masks: decode each sentence with its own [Lt, Lt] mask
            return torch.cat([self._run(x[b:b + 1], memory[b:b + 1],
                                        None if src_mask is None else src_mask[b:b + 1], tgt_mask[b])
                              for b in range(x.size(0))])
        return self._run(x, memory, src_mask, tgt_mask)
