"""Mistake: FeedForward uses the tanh approximation of GELU; every class calls super(ClassName, self).__init__() (valid Python, must not break under the grader's stand-ins).

CATCHES: feed_forward
DIAGNOSIS: ffn_tanh_gelu

BASE: reference
"""


class LayerNorm(nn.Module):

    def __init__(self, d_model, eps=1e-5):
        super(LayerNorm, self).__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class FeedForward(nn.Module):

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super(FeedForward, self).__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        h = self.linear1(x)
        h = F.relu(h) if self.activation == "relu" else F.gelu(h, approximate="tanh")
        return self.linear2(self.dropout(h))
