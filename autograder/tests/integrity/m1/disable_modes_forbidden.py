"""ATTACK: switches torch's modes off around PyTorch's own attention, so the op recorder sees nothing.

EXPECT: flag=tamper words="torch's"
BASE: reference
"""
import torch.utils._python_dispatch as _pd


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    with torch._C.DisableTorchFunction(), _pd._disable_current_modes():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return out, softmax(scores, dim=-1)
