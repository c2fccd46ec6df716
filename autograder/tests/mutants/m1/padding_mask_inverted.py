"""Mistake: padding_mask is True at the padding positions (tokens == pad_id).

CATCHES: mask_helpers
DIAGNOSIS: padding_mask_inverted

BASE: reference
"""


def padding_mask(tokens, pad_id):
    """[B, L] token ids -> [B, 1, L] bool, True where the token is not padding."""
    return (tokens == pad_id).unsqueeze(1)
