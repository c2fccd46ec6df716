"""Milestone 1's file that computes nothing: the right names, signatures, shapes and dtypes, and no
right value. A template: test_grader_subjects.py puts the helper `_fake` above it and names the kind of
nothing (zeros, the input or noise)."""
def softmax(x, dim=-1):
    return _fake(x)
def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    return _fake(q, q.shape[:-1] + v.shape[-1:]), _fake(q, q.shape[:-1] + k.shape[-2:-1])
def padding_mask(tokens, pad_id):
    return _fake(tokens, (tokens.shape[0], 1, tokens.shape[1])).bool()
def causal_mask(size, device=None):
    return _fake(torch.ones(size, size), (size, size)).bool()
