"""Mistake: PositionalEncoding registers its buffer the Annotated Transformer's way, with a batch dimension (pe.unsqueeze(0), [1, max_len, d_model]), and adds pe[:, :L]; the table function itself is right.

CATCHES: positional_module
DIAGNOSIS: pe_buffer_batch_dim
BASE: reference
"""


class PositionalEncoding(nn.Module):
    "Implement the PE function."

    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.max_len = max_len
        pe = sinusoidal_positional_encoding(max_len, d_model)
        self.register_buffer("pe", pe.unsqueeze(0))                   # [1, max_len, d_model]

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError(f"sequence of length {x.size(1)} but max_len is {self.max_len}")
        x = x + self.pe[:, : x.size(1)].requires_grad_(False)
        return self.dropout(x)
