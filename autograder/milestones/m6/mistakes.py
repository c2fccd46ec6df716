"""Milestone 6's known mistakes: CATALOGUE (the mistakes the judge recomputes are declared beside their
computations in answers.py, with @CATALOGUE.entry) and the mistakes a check recognises from its own evidence,
declared here. A declaration without text: the check's message says it."""
from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m6")

BOS_MISSING = CATALOGUE.mistake("bos_missing")
CACHE_NOT_USED = CATALOGUE.mistake("cache_not_used")
GRAD_ENABLED = CATALOGUE.mistake("grad_enabled")
MODE_NOT_RESTORED = CATALOGUE.mistake("mode_not_restored")
NEXT_TOKEN_LOGITS_WRONG = CATALOGUE.mistake(
    "next_token_logits_wrong",
    'the helper `_next_token_logits` gives wrong logits.')
NO_EARLY_STOP = CATALOGUE.mistake("no_early_stop")
NOT_EVAL_MODE = CATALOGUE.mistake(
    "not_eval_mode",
    'the model ran in training mode, so dropout changed its outputs at random: call model.eval() first '
    '(and put the mode back at the end).')
NUMPY_WORK = CATALOGUE.mistake(
    "numpy_work",
    'part of the computation ran in numpy, where no work can be counted.')
PYTHON_LOOP = CATALOGUE.mistake("python_loop")
SAMPLING_NOT_REPRODUCIBLE = CATALOGUE.mistake("sampling_not_reproducible")
SCORES_DTYPE = CATALOGUE.mistake("scores_dtype")
TEMPERATURE_NOT_CHECKED = CATALOGUE.mistake("temperature_not_checked")
TOKENS_DTYPE = CATALOGUE.mistake("tokens_dtype")
TOO_MANY_STEPS = CATALOGUE.mistake("too_many_steps")
BEAM_ITEMS_MIXED = CATALOGUE.mistake(
    "beam_items_mixed",
    "each item alone gives the right result but not in a batch: the items' rows get mixed up, e.g. memory"
    ' or src_mask repeated with .repeat (whole batch after whole batch) where '
    '.repeat_interleave(beam_size, dim=0) (each item beam_size times in a row) matches the [B * '
    'beam_size] order of the hypotheses.')

# Mistakes with their own sentence. The cached decoder's (_CACHED) are each the judge's cached decoder
# (answers.judge_cached_greedy) with these switches. EMPTY_CACHE names an id of _CACHED again, with the
# sentence for a crash: declared after it, so the catalogue keeps _CACHED's sentence for that id.

NO_PAD = CATALOGUE.mistake("no_pad_after_eos", "after a sequence's <eos> the loop keeps appending the model's choices; "
                           "every later position must be pad_id (keep a `finished` flag per row and write pad_id where it is set).")

_CACHED = (
        ("cache_without_new_position", "the newest position does not attend to itself: its own key and value must "
         "be in the cache before it attends (append, then attend over every cached position).",
         {"exclude_self": True}),
        ("cached_position_zero", "every new token gets the positional encoding of position 0; the token at "
         "position t gets model.pos_encoding.pe[t].", {"pe_first_row": True}),
        ("cached_position_off_by_one", "the new token gets the positional encoding of the next position; the "
         "token at position t (the <bos> is at 0) gets pe[t].", {"pe_next_row": True}),
        ("cached_final_norm_missing", "the decoder's final norm (model.decoder.norm, pre-LN) is not applied "
         "after the last layer.", {"no_final_norm": True}),
        ("cached_pre_ln_raw_keys", "in pre-LN the new position's keys and values come from the raw stream; they "
         "come from norm1(x), as its query does.", {"raw_keys": True}))
_CACHED_DEVIATIONS = [(CATALOGUE.mistake(_id, _text), _dev) for _id, _text, _dev in _CACHED]

GENERATOR_BY_HAND = CATALOGUE.mistake("generator_not_used", "the code reads model.generator's weight or bias instead of "
                                      "calling it: compute the logits with model.generator(x) (the checks' scripted models "
                                      "have a generator without a weight, and they watch the steps there).")

NO_MASK = CATALOGUE.mistake("no_causal_mask", "the prefix is decoded without the causal mask: pass causal_mask(t) (milestone 1) "
                            "as tgt_mask to model.decode; with two or more layers the earlier positions otherwise see later tokens.")

EMPTY_CACHE = CATALOGUE.mistake("cache_without_new_position", "at the first step your attention ran over zero keys: the "
                                "newest position must attend to itself too, so append its key and value to the cache first, then "
                                "attend over every cached position.")
