"""Mistake: LayerNorm uses the mixed-precision idiom: it normalises x.float() and casts back with .type_as(x),
so float64 inputs are normalised with float32 precision (right in float32, about 7 digits in float64).

CATCHES: layer_norm
DIAGNOSIS: normalised_in_float32

BASE: reference
"""


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        h = x.float()                                   # stable statistics
        mean = h.mean(-1, keepdim=True)
        var = ((h - mean) ** 2).mean(-1, keepdim=True)
        h = ((h - mean) / torch.sqrt(var + self.eps)).type_as(x)
        return h * self.weight + self.bias
