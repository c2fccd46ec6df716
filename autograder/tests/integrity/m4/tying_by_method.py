"""ATTACK: keeps three separate embedding tables but makes named_parameters() (also on the meta device) report
them as one object, so the weight-tying check sees them tied.

EXPECT: fails=size_tying
BASE: reference
"""


class Transformer(nn.Module):

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, activation="relu", norm_first=False, tie_embeddings=False):
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
        self._fake_tie = tie_embeddings
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        seen = {}
        for name, p in super().named_parameters(prefix, recurse, remove_duplicate=False):
            if self._fake_tie and name in ("tgt_embed.embedding.weight", "generator.weight"):
                p = dict(super().named_parameters(prefix, recurse, remove_duplicate=False))["src_embed.embedding.weight"]
            if remove_duplicate and any(q is p for q in seen.values()):
                continue
            seen[name] = p
        return iter(seen.items())

    def parameters(self, recurse=True):
        return (p for _, p in self.named_parameters(recurse=recurse))
