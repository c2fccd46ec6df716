"""Mistake: forward returns the next-token probabilities (softmax of the logits), not the raw logits.

CATCHES: model
DIAGNOSIS: logits_softmax
BASE: reference
"""


class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6,
                 d_ff=2048, dropout=0.1, max_len=5000, activation="relu", norm_first=False,
                 tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"tie_embeddings: src_vocab_size {src_vocab_size} != tgt_vocab_size {tgt_vocab_size}")
        self.src_embed = TokenEmbedding(src_vocab_size, d_model)
        self.tgt_embed = TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            shared = self.tgt_embed.embedding.weight
            self.src_embed.embedding.weight = shared
            self.generator.weight = shared
        for name, param in self.named_parameters():
            if param.dim() > 1:
                nn.init.xavier_uniform_(param)

    def encode(self, src, src_mask=None):
        x = self.src_embed(src)
        x = self.pos_encoding(x)
        return self.encoder(x, src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        y = self.pos_encoding(self.tgt_embed(tgt))
        return self.decoder(y, memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        memory = self.encode(src, src_mask)
        hidden = self.decode(tgt, memory, src_mask, tgt_mask)
        scores = self.generator(hidden)                 # [B, Lt, V]
        return torch.softmax(scores, dim=-1)            # a distribution over the next token at each position
