"""Mistake: cosines in the even columns and sines in the odd ones.

CATCHES: positional_table
DIAGNOSIS: pe_sin_cos_swapped

BASE: reference
"""


def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even for the sinusoidal encoding, got {d_model}")
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)          # [max_len, 1]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)                # [d_model/2]
    angles = pos / 10000.0 ** (two_i / d_model)                             # [max_len, d_model/2]
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.cos(angles)
    pe[:, 1::2] = torch.sin(angles)
    return pe.to(torch.get_default_dtype())                                 # [max_len, d_model]
