"""Milestone 3's known mistakes: CATALOGUE (the mistakes the judge recomputes are declared beside their
computations in answers.py, with @CATALOGUE.entry) and the mistakes a check recognises from its own evidence,
declared here. A declaration without text: the check's message says it."""
from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m3")

ACTIVATION_CASE = CATALOGUE.mistake("activation_case_insensitive")
ACTIVATION_ERROR_MESSAGE = CATALOGUE.mistake("activation_error_message")
ACTIVATION_NOT_CHECKED = CATALOGUE.mistake("activation_not_checked")
ATTENTION_DROPOUT_MISSING = CATALOGUE.mistake("attention_dropout_missing")
BATCH_MIXING = CATALOGUE.mistake("batch_mixing")
DROPOUT_IN_EVAL = CATALOGUE.mistake("dropout_in_eval")
DROPOUT_ON_RESIDUAL_SUM = CATALOGUE.mistake("dropout_on_residual_sum")
FFN_DROPOUT_BEFORE_ACTIVATION = CATALOGUE.mistake("ffn_dropout_before_activation")
FFN_DROPOUT_MISPLACED = CATALOGUE.mistake("ffn_dropout_misplaced")
FFN_DROPOUT_NOT_PASSED = CATALOGUE.mistake("ffn_dropout_not_passed")
FFN_DROPOUT_RATE_IGNORED = CATALOGUE.mistake("ffn_dropout_rate_ignored")
FFN_NO_DROPOUT = CATALOGUE.mistake("ffn_no_dropout")
GRAPH_CUT = CATALOGUE.mistake("graph_cut")
INPUT_MODIFIED = CATALOGUE.mistake("input_modified")
LAYER_NORM_INIT = CATALOGUE.mistake("layer_norm_init")
LOOKS_AHEAD = CATALOGUE.mistake("looks_ahead")
NO_RESIDUAL_DROPOUT = CATALOGUE.mistake("no_residual_dropout")
NORM_FIRST_ATTRIBUTE = CATALOGUE.mistake("norm_first_attribute")
PADDING_NOT_IGNORED = CATALOGUE.mistake("padding_not_ignored")
PARAMETER_NAMES = CATALOGUE.mistake("parameter_names")
SHARED_SUBMODULE = CATALOGUE.mistake("shared_submodule")
SUBMODULE_KINDS = CATALOGUE.mistake("submodule_kinds")
# A sub-layer the output never uses (its parameters get no gradient), one per sub-layer of a layer.
NEVER_USED = {name: CATALOGUE.mistake(f"{name}_never_used", f"`{name}` is never used: its parameters get no "
                                      f"gradient, so the output does not depend on them.")
              for name in ("self_attn", "cross_attn", "feed_forward", "norm1", "norm2", "norm3")}
