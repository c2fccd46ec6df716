"""Mistake: no check of d_model: an odd d_model fails with a shape error instead of the documented ValueError.

CATCHES: positional_table
DIAGNOSIS: pe_odd_wrong_error

BASE: reference
"""


def sinusoidal_positional_encoding(max_len, d_model):
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.cos(position * div)
    return pe.to(torch.get_default_dtype())
