"""Mistake: FeedForward keeps the dropout of a tutorial, nn.Dropout(0.1), and never uses its `dropout`
argument: the hidden activations are dropped at 0.1 whatever the layer asks for.

CATCHES: dropout
DIAGNOSIS: ffn_dropout_rate_ignored

BASE: reference
"""


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(0.1)          # the usual rate

    def forward(self, x):
        h = self.linear1(x)
        h = F.relu(h) if self.activation == "relu" else F.gelu(h)
        return self.linear2(self.dropout(h))
