"""Mistake: PositionalEncoding gives its buffer a batch dimension in place on the first call (self.pe.unsqueeze_(0)).

CATCHES: positional_module
DIAGNOSIS: pe_modified

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
        if L > self.max_len:
            raise ValueError(f"sequence length {L} is longer than max_len {self.max_len}")
        if self.pe.dim() == 2:
            self.pe.unsqueeze_(0)          # [1, max_len, d_model]: broadcasts over the batch
        return self.dropout(x + self.pe[:, :L])
