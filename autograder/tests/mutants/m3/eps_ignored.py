"""Mistake: LayerNorm ignores its eps argument and always uses 1e-5.

CATCHES: layer_norm
DIAGNOSIS: eps_ignored

BASE: reference
"""


class LayerNorm(nn.Module):

    EPS = 1e-5

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.EPS) * self.weight + self.bias
