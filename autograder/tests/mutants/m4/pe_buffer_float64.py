"""Mistake: PositionalEncoding keeps its table in float64 "for accuracy", so a float32 model gets float64 out of it.

CATCHES: positional_module
DIAGNOSIS: pe_module_dtype

BASE: reference
"""


class PositionalEncoding(nn.Module):

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model).double())
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        L = x.size(1)
        if L > self.pe.size(0):
            raise ValueError(f"sequence length {L} is longer than max_len {self.pe.size(0)}")
        return self.dropout(x + self.pe[:L])
