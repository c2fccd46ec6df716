"""Milestone 3's CATALOGUE and the mistakes its checks recognise from evidence: see diagnosis.Catalogue."""
from pathlib import Path

from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m3", Path(__file__).with_name("deviations.yaml"))

# Plain mistakes (id only), one CATALOGUE.plain call a topic rather than a same-shaped line each; NAME = id.upper()
ACTIVATION_CASE, ACTIVATION_ERROR_MESSAGE, ACTIVATION_NOT_CHECKED = CATALOGUE.plain(   # ACTIVATION_CASE: shorter
    "activation_case_insensitive", "activation_error_message", "activation_not_checked")
ATTENTION_DROPOUT_MISSING, BATCH_MIXING = CATALOGUE.plain("attention_dropout_missing", "batch_mixing")
DROPOUT_IN_EVAL, DROPOUT_ON_RESIDUAL_SUM = CATALOGUE.plain("dropout_in_eval", "dropout_on_residual_sum")
(FFN_DROPOUT_BEFORE_ACTIVATION, FFN_DROPOUT_MISPLACED, FFN_DROPOUT_NOT_PASSED, FFN_DROPOUT_RATE_IGNORED,
 FFN_NO_DROPOUT) = CATALOGUE.plain("ffn_dropout_before_activation", "ffn_dropout_misplaced", "ffn_dropout_not_passed",
                                   "ffn_dropout_rate_ignored", "ffn_no_dropout")
GRAPH_CUT, INPUT_MODIFIED = CATALOGUE.plain("graph_cut", "input_modified")
LAYER_NORM_INIT, LOOKS_AHEAD, NO_RESIDUAL_DROPOUT, NORM_FIRST_ATTRIBUTE, PADDING_NOT_IGNORED = CATALOGUE.plain(
    "layer_norm_init", "looks_ahead", "no_residual_dropout", "norm_first_attribute", "padding_not_ignored")
PARAMETER_NAMES, SHARED_SUBMODULE, SUBMODULE_KINDS = CATALOGUE.plain(
    "parameter_names", "shared_submodule", "submodule_kinds")
# A sub-layer the output never uses (its parameters get no gradient), one per sub-layer of a layer.
NEVER_USED = {name: CATALOGUE.mistake(f"{name}_never_used", f"`{name}` is never used: its parameters get no "
                                      f"gradient, so the output does not depend on them.")
              for name in ("self_attn", "cross_attn", "feed_forward", "norm1", "norm2", "norm3")}
# A layer's forward declared with other parameters than the stub's (its text, built when found, names both).
SIGNATURE_CHANGED = CATALOGUE.mistake(
    "signature_changed", "the layer's forward is not declared with the stub's parameters, in the stub's order: the "
    "grader passes them by position, so a parameter receives another argument than its name says.")
