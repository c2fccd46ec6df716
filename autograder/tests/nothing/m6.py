"""Milestone 6's file that computes nothing: the right names, signatures, shapes and dtypes, and no
right value. A template: test_grader_subjects.py puts the helper `_fake` above it and names the kind of
nothing (zeros, the input or noise)."""
import torch
def _tokens(model, src, max_len, bos_id, eos_id):
    was = model.training
    model.eval()
    with torch.no_grad():
        B = src.size(0)
        fill = {"zeros": eos_id, "input": 3, "random": 4}[KIND]
        out = torch.cat([torch.full((B, 1), bos_id), torch.full((B, max_len), fill)], 1)
    model.train(was)
    return out
def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    return _tokens(model, src, max_len, bos_id, eos_id)
def sample_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None,
                  top_p=None, generator=None):
    if not temperature > 0:
        raise ValueError("temperature must be > 0")
    return _tokens(model, src, max_len, bos_id, eos_id)
def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    return _tokens(model, src, max_len, bos_id, eos_id), torch.zeros(src.size(0), dtype=torch.float64)
def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    return _tokens(model, src, max_len, bos_id, eos_id)
