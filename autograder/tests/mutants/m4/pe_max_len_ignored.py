"""Mistake: PositionalEncoding ignores max_len and always builds a table of 5000 rows.

CATCHES: positional_module
DIAGNOSIS: pe_max_len_ignored

BASE: reference
"""


class PositionalEncoding(nn.Module):

    MAX_POSITIONS = 5000

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("pe", sinusoidal_positional_encoding(self.MAX_POSITIONS, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        L = x.size(1)
        if L > self.pe.size(0):
            raise ValueError(f"sequence length {L} is longer than the table ({self.pe.size(0)} positions)")
        return self.dropout(x + self.pe[:L])
