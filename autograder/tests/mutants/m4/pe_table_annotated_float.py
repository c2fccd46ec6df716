"""Mistake: the table is built the Annotated Transformer's way, with .float() tensors, so it is float32
whatever torch's default dtype is (with torch.set_default_dtype(torch.float64) it should be float64).

CATCHES: positional_table
DIAGNOSIS: pe_dtype

BASE: reference
"""


def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even, got {d_model}")
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.float()
