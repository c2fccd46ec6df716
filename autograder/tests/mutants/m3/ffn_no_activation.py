"""Mistake: the feed-forward network has no activation between its linear layers.

CATCHES: feed_forward
DIAGNOSIS: ffn_no_activation

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
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        h = self.linear1(x)                                      # [..., d_ff]
        return self.linear2(self.dropout(h))                     # [..., d_model]
