"""Mistake: LayerNorm takes mean and variance over the last two dimensions (L and d).

CATCHES: layer_norm
DIAGNOSIS: normalises_last_two_dims

BASE: reference
"""


class LayerNorm(nn.Module):

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=(-2, -1), keepdim=True)
        var = ((x - mean) ** 2).mean(dim=(-2, -1), keepdim=True)
        x_hat = (x - mean) / torch.sqrt(var + self.eps)          # [..., d_model]
        return x_hat * self.weight + self.bias                   # [..., d_model]
