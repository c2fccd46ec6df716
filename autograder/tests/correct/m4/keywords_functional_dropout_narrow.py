"""Correct: every setting passed on by keyword (dropout, activation, norm_first, max_len); d_model checked
before any computation; the table interleaved with torch.stack; PositionalEncoding with F.dropout(training=
self.training) on a new tensor and pe.narrow; the stacks run with functools.reduce; super(ClassName, self).

BASE: reference
"""
import functools

import torch.nn.functional as F


def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2 == 1:
        raise ValueError(f"the sinusoidal table needs an even d_model (sin/cos pairs), got d_model={d_model}")
    pos = torch.arange(max_len, dtype=torch.float64)
    inv_freq = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = torch.outer(pos, inv_freq)                                     # [max_len, d_model/2]
    table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)    # sin, cos, sin, cos, ...
    return table.to(dtype=torch.get_default_dtype())


class PositionalEncoding(nn.Module):

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super(PositionalEncoding, self).__init__()
        self.p = dropout
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len=max_len, d_model=d_model))

    def forward(self, x):
        length, rows = x.shape[1], self.pe.shape[0]
        if length > rows:
            raise ValueError(f"cannot encode {length} positions: max_len is {rows}")
        return F.dropout(x + self.pe.narrow(0, 0, length), p=self.p, training=self.training)


class TokenEmbedding(nn.Module):

    def __init__(self, vocab_size, d_model):
        super(TokenEmbedding, self).__init__()
        self.embedding = nn.Embedding(num_embeddings=vocab_size, embedding_dim=d_model)
        self.scale = d_model ** 0.5

    def forward(self, tokens):
        return self.scale * self.embedding(tokens)


class Encoder(nn.Module):

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super(Encoder, self).__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(d_model=d_model, num_heads=num_heads, d_ff=d_ff, dropout=dropout, activation=activation,
                         norm_first=norm_first) for _ in range(num_layers))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask=None):
        x = functools.reduce(lambda h, layer: layer(h, src_mask=src_mask), self.layers, x)
        return x if self.norm is None else self.norm(x)


class Decoder(nn.Module):

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super(Decoder, self).__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(d_model=d_model, num_heads=num_heads, d_ff=d_ff, dropout=dropout, activation=activation,
                         norm_first=norm_first) for _ in range(num_layers))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = functools.reduce(lambda h, layer: layer(h, memory, src_mask=src_mask, tgt_mask=tgt_mask), self.layers, x)
        return x if self.norm is None else self.norm(x)


class Transformer(nn.Module):

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super(Transformer, self).__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"cannot tie embeddings of different vocabularies ({src_vocab_size} vs {tgt_vocab_size})")
        stack = dict(num_layers=num_layers, d_model=d_model, num_heads=num_heads, d_ff=d_ff, dropout=dropout,
                     activation=activation, norm_first=norm_first)
        self.src_embed = TokenEmbedding(vocab_size=src_vocab_size, d_model=d_model)
        self.tgt_embed = TokenEmbedding(vocab_size=tgt_vocab_size, d_model=d_model)
        self.pos_encoding = PositionalEncoding(d_model=d_model, max_len=max_len, dropout=dropout)
        self.encoder = Encoder(**stack)
        self.decoder = Decoder(**stack)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            shared = self.tgt_embed.embedding.weight
            self.src_embed.embedding.weight = shared
            self.generator.weight = shared
        for name, param in self.named_parameters():
            if param.dim() > 1:
                nn.init.xavier_uniform_(param)

    def encode(self, src, src_mask=None):
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask=src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask=src_mask, tgt_mask=tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))
