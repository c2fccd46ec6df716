"""ATTACK (written by the red team, outside the course team): greedy_decode never stops early (always max_len steps); it calls model.generator(...) only at the first step and model.generator.forward(...) afterwards, which skips the grader's forward hook that counts steps.

EXPECT: score_at_most=16

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: bypass the step watcher with generator.forward
# 
# greedy_decode never stops early (always max_len steps); it calls model.generator(...) only at the first step and model.generator.forward(...) afterwards, which skips the grader's forward hook that counts steps.
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


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    """No early stop: always max_len steps. Only the first step goes through model.generator's __call__
    (the grader's hook); the others call model.generator.forward directly, so the steps are not seen."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B = src.size(0)
            memory = model.encode(src, src_mask)
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for step in range(max_len):
                h = model.decode(ys, memory, src_mask, causal_mask(ys.size(1), device=ys.device))[:, -1]
                logits = model.generator(h) if step == 0 else model.generator.forward(h)
                next_token = logits.argmax(dim=-1).masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
    finally:
        model.train(was_training)
    return ys
