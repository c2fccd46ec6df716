"""Correct: the table from torch.outer(positions, inverse frequencies) with the frequencies as
exp(-log(10000) * 2i / d_model), sines and cosines interleaved by torch.stack(..., -1).flatten(1);
`pe` a non-persistent buffer; dropout with F.dropout(training=self.training); stacks from a list
comprehension with keyword arguments; the generator's weight is tied into both embeddings; Xavier
over named_parameters() (which lists a shared Parameter once)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

from blocks import DecoderLayer, EncoderLayer, LayerNorm


def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError(f"d_model has to be even, got {d_model}")
    positions = torch.arange(max_len, dtype=torch.float64)
    inv_freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = torch.outer(positions, inv_freq)                           # [max_len, d_model/2]
    table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)  # sin, cos, sin, cos, ...
    return table.to(dtype=torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.p = dropout
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False)

    def forward(self, x):
        length = x.shape[1]
        if length > self.max_len:
            raise ValueError(f"got a sequence of length {length}, but max_len is {self.max_len}")
        return F.dropout(x + self.pe[:length], p=self.p, training=self.training)


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.scale = d_model ** 0.5

    def forward(self, tokens):
        return self.scale * self.embedding(tokens)


class Encoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList([
            EncoderLayer(d_model=d_model, num_heads=num_heads, d_ff=d_ff, dropout=dropout,
                         activation=activation, norm_first=norm_first)
            for _ in range(num_layers)])
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask=None):
        for layer in self.layers:
            x = layer(x, src_mask=src_mask)
        return x if self.norm is None else self.norm(x)


class Decoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList([
            DecoderLayer(d_model=d_model, num_heads=num_heads, d_ff=d_ff, dropout=dropout,
                         activation=activation, norm_first=norm_first)
            for _ in range(num_layers)])
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        for layer in self.layers:
            x = layer(x, memory, src_mask=src_mask, tgt_mask=tgt_mask)
        return x if self.norm is None else self.norm(x)


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError("cannot tie the embeddings of two vocabularies of different sizes: "
                             f"{src_vocab_size} (source) vs {tgt_vocab_size} (target)")
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            shared = self.generator.weight                       # [V, d_model], like an embedding table
            self.src_embed.embedding.weight = shared
            self.tgt_embed.embedding.weight = shared
        for _, param in self.named_parameters():
            if param.dim() >= 2:
                nn.init.xavier_uniform_(param)

    def encode(self, src, src_mask=None):
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask=src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask=src_mask, tgt_mask=tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        memory = self.encode(src, src_mask)
        hidden = self.decode(tgt, memory, src_mask, tgt_mask)
        return self.generator(hidden)
