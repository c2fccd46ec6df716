"""Correct: the table concatenates sin and cos along a new last axis with torch.cat and views it as
[max_len, d_model], with angles pos * 10000 ** (-2i / d_model) computed from a float64 position
column; the stacks are nn.ModuleList(generator expression) and run with functools.reduce; one
chained assignment ties the three weights; Xavier through Module.apply on each module's own
parameters (recurse=False); dropout as an nn.Dropout attribute named differently."""
import functools
import math

import torch
from torch import nn

from blocks import DecoderLayer, EncoderLayer, LayerNorm


def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even, not %d" % d_model)
    half = d_model // 2
    position = torch.arange(0, max_len, dtype=torch.float64).unsqueeze(-1)        # [max_len, 1]
    two_i = 2 * torch.arange(0, half, dtype=torch.float64)                        # [half]
    angles = position * 10000.0 ** (-two_i / d_model)                             # [max_len, half]
    both = torch.cat([torch.sin(angles).unsqueeze(-1), torch.cos(angles).unsqueeze(-1)], dim=-1)
    return both.view(max_len, d_model).to(torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))
        self.pos_dropout = nn.Dropout(dropout)

    def forward(self, x):
        _, L, _ = x.shape
        if L > self.max_len:
            raise ValueError(f"{L} positions do not fit in the table of max_len={self.max_len}")
        summed = x + self.pe[:L, :]
        return self.pos_dropout(summed)


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(num_embeddings=vocab_size, embedding_dim=d_model)

    def forward(self, tokens):
        return torch.mul(self.embedding(tokens), math.sqrt(self.d_model))


class Encoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
                                    for _ in range(num_layers))
        self.norm = None
        if norm_first:
            self.norm = LayerNorm(d_model)

    def forward(self, x, src_mask=None):
        x = functools.reduce(lambda h, layer: layer(h, src_mask), self.layers, x)
        return self.norm(x) if self.norm is not None else x


class Decoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
                                    for _ in range(num_layers))
        self.norm = None
        if norm_first:
            self.norm = LayerNorm(d_model)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = functools.reduce(lambda h, layer: layer(h, memory, src_mask, tgt_mask), self.layers, x)
        return self.norm(x) if self.norm is not None else x


def _xavier_own_matrices(module):
    for p in module.parameters(recurse=False):
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"vocabulary sizes differ ({src_vocab_size} vs {tgt_vocab_size}), cannot tie")
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            self.generator.weight = self.tgt_embed.embedding.weight = self.src_embed.embedding.weight
        self.apply(_xavier_own_matrices)

    def encode(self, src, src_mask=None):
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        memory = self.encode(src, src_mask)
        return self.generator(self.decode(tgt, memory, src_mask, tgt_mask))
