"""Mistake: LayerNorm adds eps to the standard deviation instead of the variance.

CATCHES: layer_norm
DIAGNOSIS: eps_outside_sqrt

BASE: reference
"""


class LayerNorm(nn.Module):

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)                      # [..., 1]
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)       # [..., 1], biased
        x_hat = (x - mean) / (torch.sqrt(var) + self.eps)        # [..., d_model]
        return x_hat * self.weight + self.bias                   # [..., d_model]
