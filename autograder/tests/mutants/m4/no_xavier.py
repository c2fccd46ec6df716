"""Mistake: the parameters keep PyTorch's default initialisation (no Xavier).

CATCHES: init
DIAGNOSIS: not_xavier

BASE: reference
"""


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
