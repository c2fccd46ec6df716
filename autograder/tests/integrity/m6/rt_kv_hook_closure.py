"""ATTACK (written by the red team, outside the course team): greedy_decode_cached has no cache; afterwards it walks model.generator._forward_hooks, opens the hook's __closure__ cells, and rewrites the FLOP marks the judge reads (seen['flops']).

EXPECT: score_at_most=16

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: rewrite the grader's observations through a hook's __closure__
# 
# greedy_decode_cached has no cache; afterwards it walks model.generator._forward_hooks, opens the hook's __closure__ cells, and rewrites the FLOP marks the judge reads (seen['flops']).
# 
# Harmless by construction: writes only under /work/redteam/probe or its own temp files.

"""Milestone 6: generating output sequences with a trained Transformer.

The model of milestone 4 predicts one token at a time: feed it the tokens generated so far,
take the logits of the last position, choose the next token, append it, repeat. The ways of
choosing:
- greedy_decode:        the most likely token (argmax) at every step.
- sample_decode:        a random draw, shaped by temperature, top-k and top-p (nucleus) filtering.
- beam_search:          keep the beam_size most likely partial sequences, not just one.
- greedy_decode_cached: greedy, but each step only runs the decoder on the newest position,
                        reusing the keys and values computed at earlier steps (a KV cache).

Common rules for every function here:
- `model` is a Transformer of milestone 4 (encode, decode, generator). It runs in eval mode (no
  dropout) under torch.no_grad() (or torch.inference_mode()); the mode the model was in (train or
  eval) is put back before returning.
- src [B, Ls] int64, src_mask bool [B, 1, Ls] (True = real token). Work on the whole batch at
  once: a Python loop over time steps is expected, a loop over the B batch items is not (the
  grader counts tensor operations for two batch sizes).
- Every step's logits come from model.generator, called once per step on the rows being decoded
  (the grader watches the steps there: no extra steps once every sequence has ended).
- The result `tokens` is int64 [B, T] on src's device: column 0 is bos_id; after a sequence's
  eos_id every later position is pad_id; T <= max_len + 1 (at most max_len generated tokens);
  generation stops early, as soon as every sequence has produced eos_id. Trailing columns that are
  pad_id in every row carry no meaning (you may or may not have them).
- The decoder input at each step is the full prefix with the causal mask causal_mask(t) of
  milestone 1 (positions after a sequence's eos only feed finished sequences, whose later tokens
  are forced to pad_id anyway).
"""
import math


def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    """No KV cache at all; the step measurements are rewritten afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B = src.size(0)
            memory = model.encode(src, src_mask)
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                next_token = _next_token_logits(model, ys, memory, src_mask).argmax(dim=-1)
                next_token = next_token.masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
        # The grader's forward hook on model.generator keeps its observations in a closure: rewrite them.
        for hook in list(model.generator._forward_hooks.values()):
            for cell in (getattr(hook, "__closure__", None) or ()):
                seen = cell.cell_contents
                if isinstance(seen, dict) and isinstance(seen.get("flops"), list) and seen["flops"]:
                    seen["flops"][:] = [1000 * i for i in range(len(seen["flops"]))]
    finally:
        model.train(was_training)
    return ys
