"""Correct: the angles from torch.einsum over the float64 positions and frequencies (frequencies
computed as 1 / 10000 ** (2i / d_model) with math-free tensor ops), the table filled in a float64
torch.empty through a [max_len, d/2, 2] view; PositionalEncoding's check compares against
len(self.pe); stacks from nn.ModuleList(list(map(...))); when tying, the target side reuses the
whole source TokenEmbedding module (src_embed is tgt_embed) and the generator takes its weight;
Xavier with an explicit gain=1.0 over parameters(); extra attributes kept on the model."""
import torch
from torch import nn

from blocks import DecoderLayer, EncoderLayer, LayerNorm


def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2 != 0:
        raise ValueError(f"expected an even d_model, got {d_model}")
    pos = torch.arange(max_len).to(torch.float64)
    freq = torch.ones(d_model // 2, dtype=torch.float64) / torch.full((d_model // 2,), 10000.0,
                                                                      dtype=torch.float64).pow(
        torch.arange(0, d_model, 2).to(torch.float64) / d_model)
    angles = torch.einsum("p,f->pf", pos, freq)                           # [max_len, d_model/2]
    out = torch.empty(max_len, d_model, dtype=torch.float64)
    pairs = out.view(max_len, d_model // 2, 2)
    pairs[..., 0] = angles.sin()
    pairs[..., 1] = angles.cos()
    return out.to(torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        L = x.shape[-2]
        if L > len(self.pe):
            raise ValueError(f"L={L} exceeds max_len={len(self.pe)}")
        return self.dropout(x + self.pe[:L])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, tokens):
        return self.embedding(tokens) * self.d_model ** 0.5


class Encoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        make = lambda _: EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)  # noqa: E731
        self.layers = nn.ModuleList(list(map(make, range(num_layers))))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask=None):
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x) if self.norm is not None else x


class Decoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        make = lambda _: DecoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)  # noqa: E731
        self.layers = nn.ModuleList(list(map(make, range(num_layers))))
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x) if self.norm is not None else x


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"tying needs equal vocabularies: source {src_vocab_size}, target {tgt_vocab_size}")
        self.d_model = d_model
        self.tie_embeddings = tie_embeddings
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = self.src_embed if tie_embeddings else TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            self.generator.weight = self.tgt_embed.embedding.weight
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p, gain=1.0)

    def encode(self, src, src_mask=None):
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))
