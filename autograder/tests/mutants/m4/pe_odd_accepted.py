"""Mistake: no ValueError for an odd d_model (the last column is dropped silently).

CATCHES: positional_table
DIAGNOSIS: pe_odd_accepted

BASE: reference
"""


def sinusoidal_positional_encoding(max_len, d_model):
    """The fixed table of sines and cosines of the paper's section 3.5.

        PE[pos, 2i]     = sin(pos / 10000^(2i / d_model))
        PE[pos, 2i + 1] = cos(pos / 10000^(2i / d_model))

    for positions pos = 0 .. max_len - 1 and i = 0 .. d_model/2 - 1: even columns hold sines,
    odd columns cosines, and columns 2i and 2i + 1 share one frequency.

    Args:
        max_len: number of positions (rows).
        d_model: width (columns); must be even.

    Returns:
        [max_len, d_model] in the default dtype (torch.get_default_dtype(), float32 unless changed).
        Compute in float64 and cast at the end: a float32 computation is off by up to 4e-4 at
        position 5000.

    Raises:
        ValueError: if d_model is odd.

    Example:
        Row 0 is [0, 1, 0, 1, ...] (sin 0, cos 0). With d_model = 4, row 1 is
        [sin 1, cos 1, sin 0.01, cos 0.01].
    """
    if False:
        raise ValueError(f"d_model must be even for the sinusoidal encoding, got {d_model}")
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)          # [max_len, 1]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)                # [d_model/2]
    angles = pos / 10000.0 ** (two_i / d_model)                             # [max_len, d_model/2]
    pe = torch.zeros(max_len, d_model + d_model % 2, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe[:, :d_model].to(torch.get_default_dtype())
