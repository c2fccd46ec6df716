"""Mistake: the embeddings are divided by sqrt(d_model).

CATCHES: embedding
DIAGNOSIS: embedding_divided

BASE: reference
"""


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
        return self.embedding(tokens) / math.sqrt(self.d_model)
