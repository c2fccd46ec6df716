"""Correct: LayerNorm and FeedForward flatten every leading dimension into one ([N, d_model]) and restore the
shape at the end; FeedForward's dropout is F.dropout with training=self.training; the decoder layer names each
stage of its stream (after self-attention, after cross-attention) and feeds the cross-attention the stream
after the self-attention sub-layer.
BASE: reference
"""


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        shape = x.shape
        rows = x.reshape(-1, shape[-1])                          # [N, d_model], N = product of leading dims
        centred = rows - rows.mean(dim=1, keepdim=True)
        std = torch.sqrt(centred.pow(2).mean(dim=1, keepdim=True) + self.eps)
        return (centred / std * self.weight + self.bias).reshape(shape)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', not {activation!r}")
        self.activation = activation
        self.p = dropout
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])
        h = self.linear1(rows)
        h = F.gelu(h) if self.activation == "gelu" else F.relu(h)
        h = F.dropout(h, self.p, training=self.training)
        return self.linear2(h).reshape(x.shape)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.p = dropout

    def _drop(self, h):
        return F.dropout(h, self.p, training=self.training)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        if self.norm_first:
            n1 = self.norm1(x)
            after_self = x + self._drop(self.self_attn(n1, n1, n1, tgt_mask))
            n2 = self.norm2(after_self)
            after_cross = after_self + self._drop(self.cross_attn(n2, memory, memory, src_mask))
            return after_cross + self._drop(self.feed_forward(self.norm3(after_cross)))
        after_self = self.norm1(x + self._drop(self.self_attn(x, x, x, tgt_mask)))
        after_cross = self.norm2(after_self + self._drop(self.cross_attn(after_self, memory, memory, src_mask)))
        return self.norm3(after_cross + self._drop(self.feed_forward(after_cross)))
