"""Correct: the table from complex numbers, torch.polar(1, angle) = cos + i sin, read back with
torch.view_as_real, the (cos, sin) pairs flipped to (sin, cos) and reshaped; angles as
pos * 10000 ** (-2i / d_model) with torch.pow; stacks built by an explicit loop that appends to an
empty nn.ModuleList; the length check uses the buffer's own size; tying by sharing the whole
nn.Embedding module between source and target and then the generator's weight; Xavier applied by
walking modules() (the shared table is simply re-initialised more than once)."""
import math

import torch
from torch import nn

from blocks import DecoderLayer, EncoderLayer, LayerNorm


def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2 == 1:
        raise ValueError("the sinusoidal encoding needs an even d_model (sines and cosines come in pairs), "
                         f"got d_model={d_model}")
    pos = torch.arange(max_len, dtype=torch.float64).reshape(-1, 1)
    exponents = torch.arange(d_model // 2, dtype=torch.float64) * 2 / d_model
    angle = pos * torch.pow(torch.tensor(10000.0, dtype=torch.float64), -exponents)
    rotations = torch.polar(torch.ones_like(angle), angle)              # complex128, cos + i sin
    pairs = torch.view_as_real(rotations).flip(-1)                      # [max_len, d/2, (sin, cos)]
    return pairs.reshape(max_len, d_model).to(torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))
        self.drop = nn.Dropout(p=dropout)

    def forward(self, x):
        n = x.size(-2)
        limit = self.pe.size(0)
        if n > limit:
            raise ValueError("PositionalEncoding: input has %d positions, max_len is %d" % (n, limit))
        return self.drop(torch.add(x, self.pe[:n].unsqueeze(0)))


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens):
        return self.embedding(tokens) * math.sqrt(self.embedding.embedding_dim)


class Encoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first))
        if norm_first:
            self.norm = LayerNorm(d_model)
        else:
            self.norm = None

    def forward(self, x, src_mask=None):
        out = x
        for i in range(len(self.layers)):
            out = self.layers[i](out, src_mask)
        if self.norm is not None:
            out = self.norm(out)
        return out


class Decoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(DecoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first))
        if norm_first:
            self.norm = LayerNorm(d_model)
        else:
            self.norm = None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        out = x
        for i in range(len(self.layers)):
            out = self.layers[i](out, memory, src_mask, tgt_mask)
        if self.norm is not None:
            out = self.norm(out)
        return out


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings:
            if src_vocab_size != tgt_vocab_size:
                raise ValueError(f"tie_embeddings=True needs src_vocab_size == tgt_vocab_size, "
                                 f"got {src_vocab_size} != {tgt_vocab_size}")
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size, bias=True)
        if tie_embeddings:
            self.tgt_embed.embedding = self.src_embed.embedding          # one nn.Embedding for both sides
            self.generator.weight = self.src_embed.embedding.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.xavier_uniform_(module.weight)

    def encode(self, src, src_mask=None):
        x = self.src_embed(src)
        x = self.pos_encoding(x)
        return self.encoder(x, src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        y = self.tgt_embed(tgt)
        y = self.pos_encoding(y)
        return self.decoder(y, memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))
