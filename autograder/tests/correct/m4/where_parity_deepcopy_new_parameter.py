"""Correct: the table picks sin or cos per column with torch.where on the column parity (the
frequency index is column // 2) and builds the cosines as sin(angle + pi/2); PositionalEncoding
slices the buffer with narrow(); TokenEmbedding calls F.embedding on its module's weight; stacks
are deep copies of one freshly built layer (as PyTorch's own stacks do), so every layer is its own
object with its own Parameters; tying creates one new nn.Parameter and assigns it to all three
places; Xavier over the parameters in reverse order."""
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from blocks import DecoderLayer, EncoderLayer, LayerNorm


def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2 != 0:
        raise ValueError(f"odd d_model={d_model}: the sinusoidal table needs an even width")
    column = torch.arange(d_model, dtype=torch.float64)
    pair = torch.div(column, 2, rounding_mode="floor")                  # 0, 0, 1, 1, 2, 2, ...
    frequency = 10000.0 ** (-2.0 * pair / d_model)                      # [d_model]
    angle = torch.arange(max_len, dtype=torch.float64)[:, None] * frequency[None, :]
    odd = (column % 2 == 1)[None, :]
    table = torch.where(odd, torch.sin(angle + math.pi / 2), torch.sin(angle))
    return table.type(torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)
        pe = sinusoidal_positional_encoding(max_len, d_model)
        self.register_buffer("pe", pe)

    def forward(self, x):
        seq_len = x.shape[1]
        if seq_len > self.max_len:
            raise ValueError(f"max_len={self.max_len} is too short for a sequence of length {seq_len}")
        return self.dropout(x + self.pe.narrow(0, 0, seq_len))


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.factor = math.sqrt(d_model)

    def forward(self, tokens):
        return F.embedding(tokens, self.embedding.weight) * self.factor


def _clones(layer, n):
    return nn.ModuleList([copy.deepcopy(layer) for _ in range(n)])


class Encoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = _clones(EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first), num_layers)
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask=None):
        h = x
        for enc_layer in self.layers:
            h = enc_layer(h, src_mask)
        if self.norm is not None:
            h = self.norm(h)
        return h


class Decoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = _clones(DecoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first), num_layers)
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        h = x
        for dec_layer in self.layers:
            h = dec_layer(h, memory, src_mask, tgt_mask)
        if self.norm is not None:
            h = self.norm(h)
        return h


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"src_vocab_size={src_vocab_size} and tgt_vocab_size={tgt_vocab_size} differ: "
                             "tying needs one shared vocabulary")
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            table = nn.Parameter(torch.empty(tgt_vocab_size, d_model))   # initialised below
            self.src_embed.embedding.weight = table
            self.tgt_embed.embedding.weight = table
            self.generator.weight = table
        for p in reversed(list(self.parameters())):
            if p.ndim > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src, src_mask=None):
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))
