"""Milestone 6's CATALOGUE and the mistakes its checks recognise from what the grader observed (the
model's mode and gradients at each step, the steps run, the dtype of a result): see diagnosis.Catalogue."""
from pathlib import Path

from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m6", Path(__file__).with_name("deviations.yaml"))

# Plain mistakes (id only), one CATALOGUE.plain call a topic rather than a same-shaped line each; NAME = id.upper().
CACHE_NOT_USED, GRAD_ENABLED, MODE_NOT_RESTORED = CATALOGUE.plain(
    "cache_not_used", "grad_enabled", "mode_not_restored")
PYTHON_LOOP, SAMPLING_NOT_REPRODUCIBLE = CATALOGUE.plain("python_loop", "sampling_not_reproducible")
SCORES_DTYPE, TEMPERATURE_NOT_CHECKED = CATALOGUE.plain("scores_dtype", "temperature_not_checked")
# Seen happening (the steps counted at model.generator, the dtype returned): charged once like a reproduced one.
NO_EARLY_STOP, TOKENS_DTYPE = CATALOGUE.observed("no_early_stop", "tokens_dtype")
GENERATOR_NOT_PASSED = CATALOGUE.mistake(
    "sampling_generator_unused", "torch.multinomial never gets the `generator` argument, so the draws come from "
    "torch's global random state and the same seed does not give the same tokens: torch.multinomial(probs, 1, "
    "generator=generator).", observed=True)
MEMORY_PROJECTED_EVERY_STEP = CATALOGUE.mistake(
    "memory_projected_every_step",
    "the cross-attention keys and values of memory are projected again at every step: compute them once, "
    "before the first step, and keep them in the cache.")
NEXT_TOKEN_LOGITS_WRONG = CATALOGUE.mistake(
    "next_token_logits_wrong",
    'the helper `_next_token_logits` gives wrong logits.')
NOT_EVAL_MODE = CATALOGUE.mistake(
    "not_eval_mode",
    'the model ran in training mode, so dropout changed its outputs at random: call model.eval() first '
    '(and put the mode back at the end).', observed=True)     # seen at each step: charged once
NUMPY_WORK = CATALOGUE.mistake(
    "numpy_work",
    'part of the computation ran in numpy, where no work can be counted.')

GENERATOR_BY_HAND = CATALOGUE.mistake("generator_not_used", "the code reads model.generator's weight or bias instead of "
                                      "calling it: compute the logits with model.generator(x) (the checks' scripted models "
                                      "have a generator without a weight, and they watch the steps there).")
