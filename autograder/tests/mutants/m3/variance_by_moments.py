"""Mistake: the variance is computed as E[x^2] - E[x]^2, which cancels catastrophically for a large mean and a small spread.

CATCHES: layer_norm
DIAGNOSIS: variance_by_moments

BASE: reference
"""


class LayerNorm(nn.Module):

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        mean_sq = (x * x).mean(dim=-1, keepdim=True)
        var = mean_sq - mean * mean                      # Var[x] = E[x^2] - E[x]^2
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
