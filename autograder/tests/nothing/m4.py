"""Milestone 4's file that computes nothing: the right names, signatures, shapes and dtypes, and no
right value. A template: test_grader_subjects.py puts the helper `_fake` above it and names the kind of
nothing (zeros, the input or noise)."""
import math
from torch import nn
from blocks import DecoderLayer, EncoderLayer, LayerNorm
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    return _fake(torch.zeros(max_len, d_model, dtype=torch.get_default_dtype()))
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))
    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError(f"length {x.size(1)} > max_len {self.pe.size(0)}")
        return _fake(x)
class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
    def forward(self, tokens):
        return _fake(self.embedding(tokens))
class Encoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
                                    for _ in range(num_layers))
        self.norm = LayerNorm(d_model) if norm_first else None
    def forward(self, x, src_mask=None):
        return _fake(x)
class Decoder(Encoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.layers = nn.ModuleList(DecoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
                                    for _ in range(num_layers))
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return _fake(x)
class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, activation="relu", norm_first=False, tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError("vocab sizes differ")
        self.src_embed, self.tgt_embed = TokenEmbedding(src_vocab_size, d_model), TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            self.src_embed.embedding.weight = self.tgt_embed.embedding.weight
            self.generator.weight = self.tgt_embed.embedding.weight
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
    def encode(self, src, src_mask=None):
        return _fake(self.src_embed(src))
    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return _fake(self.tgt_embed(tgt))
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return _fake(self.generator(self.decode(tgt, None)))
