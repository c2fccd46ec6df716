"""Correct: the generator is a subclass of nn.Linear (names kept: generator.weight, generator.bias) that returns its
raw logits; forward writes the whole path inline instead of calling encode and decode, and decode passes its
arguments on by keyword.
BASE: reference
"""


class Generator(nn.Linear):
    """decoder output [..., d_model] -> logits [..., vocab], before any softmax."""

    def __init__(self, d_model, vocab_size):
        super().__init__(d_model, vocab_size, bias=True)


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"tie_embeddings needs src_vocab_size == tgt_vocab_size, got {src_vocab_size} and "
                             f"{tgt_vocab_size}")
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len=max_len, dropout=dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout=dropout, activation=activation,
                               norm_first=norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout=dropout, activation=activation,
                               norm_first=norm_first)
        self.generator = Generator(d_model, tgt_vocab_size)
        if tie_embeddings:
            table = self.src_embed.embedding.weight
            self.tgt_embed.embedding.weight = table
            self.generator.weight = table
        for name, p in self.named_parameters():
            if p.ndim >= 2:
                nn.init.xavier_uniform_(p)

    def encode(self, src, src_mask=None):
        return self.encoder(self.pos_encoding(self.src_embed(src)), src_mask=src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory=memory, src_mask=src_mask,
                            tgt_mask=tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        memory = self.encoder(self.pos_encoding(self.src_embed(src)), src_mask)
        hidden = self.decoder(self.pos_encoding(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)
        return self.generator(hidden)
