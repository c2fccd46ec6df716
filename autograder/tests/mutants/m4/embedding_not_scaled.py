"""Mistake: the embeddings are not multiplied by sqrt(d_model).

CATCHES: embedding
DIAGNOSIS: embedding_not_scaled

BASE: reference
"""


class TokenEmbedding(nn.Module):

    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)

    def forward(self, tokens):
        return self.embedding(tokens)
