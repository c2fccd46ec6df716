"""Mistake: LayerNorm multiplies by bias and adds weight.

CATCHES: layer_norm, from_scratch
DIAGNOSIS: weight_bias_swapped

BASE: reference
"""


class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension (the features of one position).

        y = (x - mean) / sqrt(var + eps) * weight + bias

    mean and var are taken over the last dimension only, and var is the *biased* variance (divide
    by d_model, not d_model - 1), as in torch.nn.LayerNorm. eps goes inside the square root.

    Args:
        d_model: size of the last dimension.
        eps: small constant added to the variance.

    Parameters:
        weight: [d_model], initialised to ones.
        bias:   [d_model], initialised to zeros.

    Do not use nn.LayerNorm or F.layer_norm: write it with mean, subtraction and sqrt.
    """

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        """Normalise x [..., d_model] (any number of leading dimensions) -> [..., d_model].

        x, weight and bias share one dtype (float32 or float64); the output has that dtype too.
        The input is not modified.

        Example:
            LayerNorm(2) on [[1.0, 3.0]]: mean 2, biased variance 1 -> about [[-1.0, 1.0]]
            (exactly [[-1, 1]] / sqrt(1 + eps)).
        """
        mean = x.mean(dim=-1, keepdim=True)                      # [..., 1]
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)       # [..., 1], biased
        x_hat = (x - mean) / torch.sqrt(var + self.eps)          # [..., d_model]
        return x_hat * self.bias + self.weight                   # [..., d_model]
