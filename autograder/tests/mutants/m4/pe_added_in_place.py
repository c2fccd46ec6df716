"""Mistake: PositionalEncoding adds the table to its input in place (x += pe[:L]), changing the caller's tensor.

CATCHES: positional_module
DIAGNOSIS: input_modified

BASE: reference
"""


class PositionalEncoding(nn.Module):

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        L = x.size(1)
        if L > self.pe.size(0):
            raise ValueError(f"sequence length {L} is longer than max_len {self.pe.size(0)}")
        x += self.pe[:L]
        return self.dropout(x)
