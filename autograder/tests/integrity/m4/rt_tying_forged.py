"""ATTACK (written by the red team, outside the course team): Ties the embeddings by copying values (three separate tables), then overrides Transformer.named_parameters to list the same Parameter object under the three names, so the worker's 'tied' groups and parameter count say the tables are shared.

EXPECT: score_at_most=18
"""
# RED-TEAM ATTACK SUBMISSION: forge weight tying by overriding named_parameters
# 
# Ties the embeddings by copying values (three separate tables), then overrides Transformer.named_parameters to list the same Parameter object under the three names, so the worker's 'tied' groups and parameter count say the tables are shared.
# 
# Harmless by construction: writes only under /work/redteam/probe or its own temp files.

"""Milestone 4: the full encoder-decoder Transformer.

Tokens become vectors (TokenEmbedding), positions are added (PositionalEncoding), a stack of
EncoderLayers reads the source into `memory`, a stack of DecoderLayers reads the target so far
while looking at `memory`, and a final linear layer (the generator) turns each decoder position
into logits over the target vocabulary.

    src [B, Ls] -> src_embed -> pos_encoding -> encoder -> memory [B, Ls, d_model]
    tgt [B, Lt] -> tgt_embed -> pos_encoding -> decoder(., memory) -> generator -> logits [B, Lt, V]

Masks are boolean, True = may attend (as in milestones 1 to 3). Nothing here builds a mask for
you: the caller passes the source padding mask and the target mask (causal and padding).
"""
import math

import torch
from torch import nn

from blocks import DecoderLayer, EncoderLayer, LayerNorm


def sinusoidal_positional_encoding(max_len, d_model):
    """The fixed table of sines and cosines of the paper's section 3.5.

        PE[pos, 2i]     = sin(pos / 10000^(2i / d_model))
        PE[pos, 2i + 1] = cos(pos / 10000^(2i / d_model))

    for positions pos = 0 .. max_len - 1 and i = 0 .. d_model/2 - 1: even columns hold sines,
    odd columns cosines, and columns 2i and 2i + 1 share one frequency.

    Args:
        max_len: number of positions (rows).
        d_model: width (columns); must be even.

    Returns:
        [max_len, d_model] in the default dtype (torch.get_default_dtype(), float32 unless changed).
        Computing in float64 and casting at the end is the most accurate; a float32 computation,
        off by up to 4e-4 at position 5000, is accepted too (the checks allow for it).

    Raises:
        ValueError: if d_model is odd.

    Example:
        Row 0 is [0, 1, 0, 1, ...] (sin 0, cos 0). With d_model = 4, row 1 is
        [sin 1, cos 1, sin 0.01, cos 0.01].
    """
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even for the sinusoidal encoding, got {d_model}")
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)          # [max_len, 1]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)                # [d_model/2]
    angles = pos / 10000.0 ** (two_i / d_model)                             # [max_len, d_model/2]
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.to(torch.get_default_dtype())                                 # [max_len, d_model]


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to a batch of embeddings, then applies dropout.

    Args:
        d_model: width of the embeddings.
        max_len: longest sequence supported.
        dropout: dropout probability on the sum (training mode only).

    Buffers:
        pe: [max_len, d_model], sinusoidal_positional_encoding(max_len, d_model). Register it with
            self.register_buffer("pe", ...): it is not a parameter (never trained), but it moves
            with model.to(device) and model.double().
    """

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))   # [max_len, d_model]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [B, L, d_model] -> dropout(x + pe[:L]), [B, L, d_model]. Position 0 gets row 0.

        Raises:
            ValueError: if L > max_len; the message gives both numbers.
        The input is not modified.
        """
        L = x.size(1)
        if L > self.pe.size(0):
            raise ValueError(f"sequence length {L} is longer than max_len {self.pe.size(0)}")
        return self.dropout(x + self.pe[:L])                                   # [B, L, d_model]


class TokenEmbedding(nn.Module):
    """Token ids -> vectors, scaled by sqrt(d_model) (the paper's section 3.4).

    Args:
        vocab_size: number of token ids.
        d_model: width of each vector.

    Submodules:
        embedding: nn.Embedding(vocab_size, d_model)
    """

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens):
        """tokens [B, L] (int64) -> [B, L, d_model]: embedding(tokens) * sqrt(d_model)."""
        return self.embedding(tokens) * math.sqrt(self.d_model)               # [B, L, d_model]


class Encoder(nn.Module):
    """A stack of `num_layers` EncoderLayers, run in order.

    Args:
        num_layers: number of layers N.
        d_model, num_heads, d_ff, dropout, activation, norm_first: passed to every EncoderLayer.

    Submodules:
        layers: nn.ModuleList of num_layers EncoderLayers, each its own object with its own weights
            (not the same layer repeated, not a plain Python list).
        norm: a final LayerNorm(d_model) (the one of blocks.py) when norm_first is True, else None.
            Pre-LN layers leave the residual stream unnormalised, so the stack normalises it once
            at the end; post-LN layers already end with a norm.
    """

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList([
            EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
            for _ in range(num_layers)
        ])
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, src_mask=None):
        """x [B, Ls, d_model], src_mask None or bool broadcastable to [B, Ls, Ls] -> [B, Ls, d_model]."""
        for layer in self.layers:
            x = layer(x, src_mask)                                            # [B, Ls, d_model]
        if self.norm is not None:
            x = self.norm(x)
        return x


class Decoder(nn.Module):
    """A stack of `num_layers` DecoderLayers, run in order. Arguments and `layers` / `norm` as in
    Encoder, with DecoderLayer."""

    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu",
                 norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList([
            DecoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
            for _ in range(num_layers)
        ])
        self.norm = LayerNorm(d_model) if norm_first else None

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        """Run the stack.

        Args:
            x: [B, Lt, d_model]; memory: [B, Ls, d_model] (the encoder output, the same for every layer).
            src_mask: None or bool broadcastable to [B, Lt, Ls]; tgt_mask: None or bool
                broadcastable to [B, Lt, Lt]. None means no mask: no causal mask is added for you.

        Returns:
            [B, Lt, d_model]
        """
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)                          # [B, Lt, d_model]
        if self.norm is not None:
            x = self.norm(x)
        return x


class Transformer(nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes.
        d_model, num_heads, num_layers, d_ff, dropout, activation, norm_first: as in Encoder and
            Decoder (num_layers encoder layers AND num_layers decoder layers).
        max_len: longest sequence the positional encoding supports.
        tie_embeddings: share one weight matrix between the source embedding, the target
            embedding and the generator (the paper's section 3.4; needs one shared vocabulary).

    Submodules:
        src_embed, tgt_embed: TokenEmbedding(src_vocab_size, d_model), TokenEmbedding(tgt_vocab_size, d_model)
        pos_encoding: PositionalEncoding(d_model, max_len, dropout), one module used for both sides
        encoder: Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        decoder: Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        generator: nn.Linear(d_model, tgt_vocab_size), with a bias

    With tie_embeddings=True, src_embed.embedding.weight, tgt_embed.embedding.weight and
    generator.weight are the very same nn.Parameter object (assign it; `a is b` holds), so the model
    has one [vocab, d_model] matrix, counted once by model.parameters(). The generator keeps its
    own bias.

    Initialisation: after any tying, every parameter with more than one dimension is
    re-initialised with nn.init.xavier_uniform_; biases and LayerNorm parameters keep their
    defaults (zeros / ones / nn.Linear's default bias).

    Raises:
        ValueError: tie_embeddings=True with src_vocab_size != tgt_vocab_size (the message gives both).

    Size check: Transformer(37000, 37000, tie_embeddings=True) has 63,119,496 parameters
    (63,121,544 with norm_first=True: two final norms); untied, 101,007,496.
    """

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"tie_embeddings needs one vocabulary, got src_vocab_size {src_vocab_size} "
                             f"and tgt_vocab_size {tgt_vocab_size}")
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            with torch.no_grad():                 # "tied" by copying the values (three separate tables)
                self.src_embed.embedding.weight.copy_(self.tgt_embed.embedding.weight)
                self.generator.weight.copy_(self.tgt_embed.embedding.weight)
        self._claims_tied = tie_embeddings
        for p in self.parameters():          # shared parameters are listed once
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src, src_mask=None):
        """src [B, Ls] int64, src_mask None or bool [B, 1, Ls] -> memory [B, Ls, d_model]."""
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        """tgt [B, Lt] int64, memory [B, Ls, d_model], masks as in Decoder -> [B, Lt, d_model]
        (decoder output, before the generator)."""
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        """Logits for every target position.

        Args:
            src: [B, Ls] int64; tgt: [B, Lt] int64 (the decoder input, starting with <bos>).
            src_mask: None or bool [B, 1, Ls] (source padding).
            tgt_mask: None or bool broadcastable to [B, Lt, Lt] (causal and target padding).

        Returns:
            logits [B, Lt, tgt_vocab_size], before any softmax.
        """
        memory = self.encode(src, src_mask)                                   # [B, Ls, d_model]
        return self.generator(self.decode(tgt, memory, src_mask, tgt_mask))   # [B, Lt, V]


def _named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
    """List the three tables as one Parameter when tying was asked (they are in fact three copies)."""
    items = list(nn.Module.named_parameters(self, prefix, recurse, remove_duplicate=False))
    if getattr(self, "_claims_tied", False):
        one = dict(items).get(prefix + ("." if prefix else "") + "tgt_embed.embedding.weight")
        names = {prefix + ("." if prefix else "") + n for n in
                 ("src_embed.embedding.weight", "tgt_embed.embedding.weight", "generator.weight")}
        items = [(n, one if n in names else p) for n, p in items]
    seen = set()
    for n, p in items:
        if remove_duplicate and id(p) in seen:
            continue
        seen.add(id(p))
        yield n, p


Transformer.named_parameters = _named_parameters
