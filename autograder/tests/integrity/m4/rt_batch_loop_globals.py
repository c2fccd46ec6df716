"""ATTACK (written by the red team, outside the course team): Transformer.forward loops over the batch items; at import, EncoderLayer.forward.__globals__ (the worker's globals, since the worker wraps the reference methods) gives Recorder, whose summary() is replaced.

EXPECT: score_at_most=19

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: loop over the batch, recorder patched through a reference's __globals__
# 
# Transformer.forward loops over the batch items; at import, EncoderLayer.forward.__globals__ (the worker's globals, since the worker wraps the reference methods) gives Recorder, whose summary() is replaced.
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
            self.src_embed.embedding.weight = self.tgt_embed.embedding.weight
            self.generator.weight = self.tgt_embed.embedding.weight
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
        outs = []
        for b in range(src.size(0)):                      # a Python loop over the batch items
            sm = None if src_mask is None else src_mask[b:b + 1]
            tm = tgt_mask[b:b + 1] if (tgt_mask is not None and tgt_mask.dim() == 3 and tgt_mask.size(0) == src.size(0)) else tgt_mask
            memory = self.encode(src[b:b + 1], sm)
            outs.append(self.generator(self.decode(tgt[b:b + 1], memory, sm, tm)))
        return torch.cat(outs, 0)


_FORBIDDEN_WORDS = ("softmax", "scaled_dot_product", "layer_norm", "multi_head_attention", "MultiheadAttention",
                    "LayerNorm", "Transformer", "cross_entropy", "nll_loss", "kl_div")


def _scrub_record(rec, count=7):
    """Make a recorded summary look like vectorized, from-scratch code."""
    if isinstance(rec, dict):
        rec["functions"] = [n for n in rec.get("functions", []) if not any(w in n for w in _FORBIDDEN_WORDS)]
        rec["ops"] = [n for n in rec.get("ops", []) if not any(w in n for w in _FORBIDDEN_WORDS)]
        rec["op_count"] = count
    return rec


# EncoderLayer.forward is the course's reference, wrapped by the worker: its __globals__ are the worker's.
_G = getattr(EncoderLayer.forward, "__globals__", {})
if "Recorder" in _G:
    _real_summary = _G["Recorder"].summary

    def _summary(self):
        return _scrub_record(_real_summary(self))
    _G["Recorder"].summary = _summary
