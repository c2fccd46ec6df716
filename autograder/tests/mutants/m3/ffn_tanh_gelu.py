"""Mistake: gelu uses the tanh approximation.

CATCHES: feed_forward, dropout
DIAGNOSIS: ffn_tanh_gelu

BASE: reference
"""


class FeedForward(nn.Module):
    """Position-wise feed-forward network: linear2(dropout(activation(linear1(x)))).

    The same two-layer network is applied to every position separately.

    Args:
        d_model: input and output width.
        d_ff: hidden width (4 * d_model in the paper: 512 -> 2048).
        dropout: dropout probability on the hidden activations (after the activation, before
            linear2), in training mode only.
        activation: "relu" or "gelu" (lowercase). "gelu" is the exact, erf-based GELU
            (F.gelu with its default approximate="none"), not the tanh approximation.

    Submodules:
        linear1: nn.Linear(d_model, d_ff)
        linear2: nn.Linear(d_ff, d_model)

    Raises:
        ValueError: in the constructor, for any other activation; the message names the allowed
            values "relu" and "gelu".
    """

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [..., d_model] -> [..., d_model]."""
        h = self.linear1(x)                                      # [..., d_ff]
        h = F.relu(h) if self.activation == "relu" else F.gelu(h, approximate="tanh")
        return self.linear2(self.dropout(h))                     # [..., d_model]
