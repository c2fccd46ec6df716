"""Milestone 6's known mistakes: CATALOGUE (the mistakes the judge recomputes are declared beside their
computations in answers.py, with @CATALOGUE.entry and CATALOGUE.deviations) and the mistakes a check
recognises from its own evidence (what the grader observed: the model's mode and gradients at each step,
the steps run, the dtype of a result), declared here. A declaration without text: the check's message says it."""
from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m6")

CACHE_NOT_USED = CATALOGUE.mistake("cache_not_used")
MEMORY_PROJECTED_EVERY_STEP = CATALOGUE.mistake(
    "memory_projected_every_step",
    "the cross-attention keys and values of memory are projected again at every step: compute them once, "
    "before the first step, and keep them in the cache.")
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

GENERATOR_BY_HAND = CATALOGUE.mistake("generator_not_used", "the code reads model.generator's weight or bias instead of "
                                      "calling it: compute the logits with model.generator(x) (the checks' scripted models "
                                      "have a generator without a weight, and they watch the steps there).")
