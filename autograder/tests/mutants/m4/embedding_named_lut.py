"""Mistake: TokenEmbedding keeps its table as `lut` (the Annotated Transformer's Embeddings), not the stub's `embedding`; the values are right.

CATCHES: embedding
DIAGNOSIS: parameter_names
BASE: reference
"""


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)
