"""Milestone 2's known mistakes: CATALOGUE (the mistakes the judge recomputes are declared beside their
computations in answers.py, with @CATALOGUE.entry) and the mistakes a check recognises from its own evidence,
declared here. A declaration without text: the check's message says it."""
from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m2")

BIAS_IGNORED = CATALOGUE.mistake(
    "bias_ignored",
    '`bias=False` must create the projections without a bias: nn.Linear(d_model, d_model, bias=bias).')
DROPOUT_IN_EVAL = CATALOGUE.mistake("dropout_in_eval")
DROPOUT_KEEP_PROBABILITY = CATALOGUE.mistake("dropout_keep_probability")
DROPOUT_NEVER = CATALOGUE.mistake("dropout_never")
DROPOUT_NOT_ON_WEIGHTS = CATALOGUE.mistake("dropout_not_on_weights")
ERROR_WITHOUT_NUMBERS = CATALOGUE.mistake("error_without_numbers")
GRAPH_CUT = CATALOGUE.mistake("graph_cut")
INPUT_MODIFIED = CATALOGUE.mistake("input_modified")
NO_DIVISIBILITY_CHECK = CATALOGUE.mistake("no_divisibility_check")
PARAMETER_NAMES = CATALOGUE.mistake("parameter_names")
RANDOM_FORWARD = CATALOGUE.mistake("random_forward")
VALID_CONFIG_REJECTED = CATALOGUE.mistake("valid_config_rejected")
WEIGHTS_AVERAGED = CATALOGUE.mistake(
    "weights_averaged",
    '`self.attn_weights` must keep every head: [B, H, Lq, Lk], not an average over heads.')
WEIGHTS_NOT_DETACHED = CATALOGUE.mistake("weights_not_detached")
WEIGHTS_NOT_STORED = CATALOGUE.mistake("weights_not_stored")
WRONG_EXCEPTION = CATALOGUE.mistake("wrong_exception")
WRONG_HEAD_COUNT = CATALOGUE.mistake("wrong_head_count")
# A projection the output never uses (its weights get no gradient), one per projection.
NEVER_USED = {name: CATALOGUE.mistake(f"{name}_never_used", f"`{name}` is never used: its weights get no gradient, "
                                      f"so the output does not depend on them.")
              for name in ("w_q", "w_k", "w_v", "w_o")}
