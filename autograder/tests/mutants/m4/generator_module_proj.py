"""Mistake: the generator is the Annotated Transformer's Generator module (its own nn.Linear named `proj`, then log_softmax), kept under the course's name `generator`; its parameters are generator.proj.weight / .bias and the output is log-probabilities.

CATCHES: model
DIAGNOSIS: logits_log_softmax, parameter_names
BASE: reference
"""
from torch.nn.functional import log_softmax


class Generator(nn.Module):
    "Define standard linear + softmax generation step."

    def __init__(self, d_model, vocab):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, x):
        return log_softmax(self.proj(x), dim=-1)


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"cannot share one table between {src_vocab_size} and {tgt_vocab_size} tokens")
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = Generator(d_model, tgt_vocab_size)
        if tie_embeddings:
            self.src_embed.embedding.weight = self.tgt_embed.embedding.weight
            self.generator.proj.weight = self.tgt_embed.embedding.weight
        # Initialize parameters with Glorot / fan_avg.
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src, src_mask=None):
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        "Take in and process masked src and target sequences."
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))
