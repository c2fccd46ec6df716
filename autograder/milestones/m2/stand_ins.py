"""Milestone 2's stand-ins: correct, judge-written `split_heads` and `merge_heads`, sent to the worker as
source when the student's split_merge group failed, so MultiHeadAttention is graded on its own merits.
Importing this module registers them."""
from autograder.grading.checks import stand_ins


def _stand_in_split_heads(x, num_heads):
    B, L, d_model = x.shape
    return x.reshape(B, L, num_heads, d_model // num_heads).transpose(1, 2)


def _stand_in_merge_heads(x):
    B, H, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, H * d_k)


stand_ins("m2", split_heads=_stand_in_split_heads, merge_heads=_stand_in_merge_heads)
