"""Mistake: padding_mask returns [B, L] without the query dimension of size 1.

CATCHES: mask_helpers
DIAGNOSIS: padding_mask_no_query_dim

BASE: reference
"""


def padding_mask(tokens, pad_id):
    """[B, L] token ids -> [B, 1, L] bool, True where the token is not padding."""
    return tokens != pad_id
