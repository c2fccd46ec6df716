"""Mistake: forward returns log_softmax of the generator's output (the Annotated Transformer's Generator step), not the raw logits.

CATCHES: model
DIAGNOSIS: logits_log_softmax
BASE: reference
"""
import torch.nn.functional as F


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"cannot tie {src_vocab_size} and {tgt_vocab_size}")
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        # "Define standard linear + softmax generation step." (The Annotated Transformer)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            self.src_embed.embedding.weight = self.tgt_embed.embedding.weight
            self.generator.weight = self.tgt_embed.embedding.weight
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src, src_mask=None):
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        memory = self.encode(src, src_mask)
        out = self.decode(tgt, memory, src_mask, tgt_mask)
        # the generator's projection followed by the log-softmax over the vocabulary
        return F.log_softmax(self.generator(out), dim=-1)
