"""Mistake: FeedForward lower-cases the activation name, so "GELU" and "ReLU" are accepted (the docstring asks for ValueError).

CATCHES: structure
DIAGNOSIS: activation_case_insensitive

BASE: reference
"""


class FeedForward(nn.Module):

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        activation = activation.lower()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        h = self.linear1(x)
        h = F.relu(h) if self.activation == "relu" else F.gelu(h)
        return self.linear2(self.dropout(h))
