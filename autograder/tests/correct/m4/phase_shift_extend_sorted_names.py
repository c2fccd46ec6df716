"""Correct: every column of the table is one sine, sin(pos * w_j + (j % 2) * pi/2), so odd columns
become cosines by a phase shift, with w_j = 1 / 10000 ** ((j - j % 2) / d_model) and a single
broadcast; the length check raises before touching the table, and positions are added with
x + pe[None, :L]; stacks built with ModuleList.extend; the three weights tied to the target
embedding one after the other; Xavier over named_parameters() in sorted name order, the ndim test
written as len(p.shape) >= 2; forward runs the encoder and decoder modules directly."""
import math

import torch
from torch import nn

from blocks import DecoderLayer, EncoderLayer, LayerNorm


def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2 == 1:
        raise ValueError(f"sinusoidal_positional_encoding: d_model={d_model} is odd")
    j = torch.arange(d_model, dtype=torch.float64)
    parity = torch.remainder(j, 2)
    w = 1.0 / torch.pow(10000.0, (j - parity) / d_model)                    # [d_model]
    pos = torch.arange(max_len, dtype=torch.float64).view(max_len, 1)
    table = torch.sin(pos * w + parity * (math.pi / 2))                       # [max_len, d_model]
    return table.to(torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.max_len = int(max_len)
        self.register_buffer(name="pe", tensor=sinusoidal_positional_encoding(max_len, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError(f"sequence too long: L={x.size(1)} > max_len={self.max_len}")
        return self.dropout(x + self.pe[None, :x.size(1)])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.sqrt_d = math.sqrt(d_model)

    def forward(self, tokens):
        vectors = self.embedding(tokens)
        return vectors * self.sqrt_d


class Encoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList()
        self.layers.extend(EncoderLayer(d_model, num_heads, d_ff, dropout=dropout, activation=activation,
                                        norm_first=norm_first) for _ in range(num_layers))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask=None):
        for idx, layer in enumerate(self.layers):
            x = layer(x, src_mask)
        if self.norm:
            x = self.norm(x)
        return x


class Decoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList()
        self.layers.extend(DecoderLayer(d_model, num_heads, d_ff, dropout=dropout, activation=activation,
                                        norm_first=norm_first) for _ in range(num_layers))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        for layer in self.layers:
            x = layer(x, memory, src_mask=src_mask, tgt_mask=tgt_mask)
        if self.norm:
            x = self.norm(x)
        return x


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError("tie_embeddings: src_vocab_size ({}) != tgt_vocab_size ({})".format(
                src_vocab_size, tgt_vocab_size))
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            self.src_embed.embedding.weight = self.tgt_embed.embedding.weight
            self.generator.weight = self.tgt_embed.embedding.weight
        params = dict(self.named_parameters())
        for name in sorted(params):
            if len(params[name].shape) >= 2:
                nn.init.xavier_uniform_(params[name])

    def encode(self, src, src_mask=None):
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        memory = self.encoder(self.pos_encoding(self.src_embed(src)), src_mask)
        hidden = self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)
        return self.generator(hidden)
