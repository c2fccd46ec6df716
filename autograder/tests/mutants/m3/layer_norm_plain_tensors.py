"""Mistake: LayerNorm keeps gamma and beta as plain tensors (not nn.Parameter, other names).

CATCHES: layer_norm
DIAGNOSIS: parameter_names

BASE: reference
"""


class LayerNorm(nn.Module):

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = torch.ones(d_model)
        self.beta = torch.zeros(d_model)

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)                      # [..., 1]
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)       # [..., 1], biased
        x_hat = (x - mean) / torch.sqrt(var + self.eps)          # [..., d_model]
        return x_hat * self.gamma.to(x.dtype) + self.beta.to(x.dtype)
