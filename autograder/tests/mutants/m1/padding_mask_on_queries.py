"""Mistake: padding_mask adds the size-1 dimension last ([B, L, 1]), masking queries instead of keys.

CATCHES: mask_helpers
DIAGNOSIS: padding_mask_on_queries

BASE: reference
"""


def padding_mask(tokens, pad_id):
    """[B, L] token ids -> [B, 1, L] bool, True where the token is not padding."""
    return (tokens != pad_id).unsqueeze(-1)
