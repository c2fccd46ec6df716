"""Mistake: an unknown activation silently falls back to relu.

CATCHES: structure
DIAGNOSIS: activation_not_checked

BASE: reference
"""


class FeedForward(nn.Module):

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        h = self.linear1(x)                                      # [..., d_ff]
        h = F.relu(h) if self.activation == "relu" else F.gelu(h)
        return self.linear2(self.dropout(h))                     # [..., d_model]
