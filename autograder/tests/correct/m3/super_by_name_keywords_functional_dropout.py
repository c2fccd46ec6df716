"""Correct: super(ClassName, self).__init__() everywhere; LayerNorm with a stored eps and torch.rsqrt; the
activation chosen by an if/elif that refuses any other spelling; F.dropout with training=self.training in
every place (hidden activations, each sub-layer's output), the rate passed on by keyword; 2-D masks given a
batch dimension out of place before the attention.

BASE: reference
"""


class LayerNorm(nn.Module):

    def __init__(self, d_model, eps=1e-5):
        super(LayerNorm, self).__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        inv_std = torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * (centred * inv_std) + self.bias


class FeedForward(nn.Module):

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super(FeedForward, self).__init__()
        if activation == "relu":
            self.act = F.relu
        elif activation == "gelu":
            self.act = F.gelu
        else:
            raise ValueError(f"unknown activation {activation!r}: use 'relu' or 'gelu'")
        self.p = dropout
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = F.dropout(self.act(self.linear1(x)), p=self.p, training=self.training)
        return self.linear2(h)


def _batched(mask):
    """A 2-D [Lq, Lk] mask as [1, Lq, Lk] (a new view; the caller's mask is left as it is)."""
    return mask.unsqueeze(0) if mask is not None and mask.dim() == 2 else mask


class EncoderLayer(nn.Module):

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super(EncoderLayer, self).__init__()
        self.norm_first = norm_first
        self.p = dropout
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)

    def _drop(self, h):
        return F.dropout(h, p=self.p, training=self.training)

    def forward(self, x, src_mask=None):
        mask = _batched(src_mask)
        attend = lambda h: self.self_attn(h, h, h, mask)  # noqa: E731
        if self.norm_first:
            x = x + self._drop(attend(self.norm1(x)))
            return x + self._drop(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self._drop(attend(x)))
        return self.norm2(x + self._drop(self.feed_forward(x)))


class DecoderLayer(nn.Module):

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super(DecoderLayer, self).__init__()
        self.norm_first = norm_first
        self.p = dropout
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)

    def _drop(self, h):
        return F.dropout(h, p=self.p, training=self.training)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        src_mask, tgt_mask = _batched(src_mask), _batched(tgt_mask)
        subs = ((self.norm1, lambda h: self.self_attn(h, h, h, tgt_mask)),
                (self.norm2, lambda h: self.cross_attn(h, memory, memory, src_mask)),
                (self.norm3, self.feed_forward))
        for norm, sub in subs:
            x = x + self._drop(sub(norm(x))) if self.norm_first else norm(x + self._drop(sub(x)))
        return x
