"""Milestone 1's known mistakes: CATALOGUE (the mistakes the judge recomputes are declared beside their
computations in answers.py, with @CATALOGUE.entry) and the mistakes a check recognises from its own evidence,
declared here. A declaration without text: the check's message says it."""
from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m1")

CAUSAL_IGNORES_DEVICE = CATALOGUE.mistake("causal_ignores_device")
CAUSAL_INVERTED = CATALOGUE.mistake("causal_inverted")
CAUSAL_NO_DIAGONAL = CATALOGUE.mistake("causal_no_diagonal")
CAUSAL_TRANSPOSED = CATALOGUE.mistake("causal_transposed")
DROPOUT_BEFORE_SOFTMAX = CATALOGUE.mistake("dropout_before_softmax")
DROPOUT_IGNORED = CATALOGUE.mistake("dropout_ignored")
DROPOUT_KEEP_PROBABILITY = CATALOGUE.mistake("dropout_keep_probability")
DTYPE_CHANGED = CATALOGUE.mistake("dtype_changed")
GRAPH_CUT = CATALOGUE.mistake("graph_cut")
INPUT_MODIFIED = CATALOGUE.mistake("input_modified")
MASK_NOT_BOOL = CATALOGUE.mistake("mask_not_bool")
NAN_BLOCKED_ROW = CATALOGUE.mistake("nan_blocked_row")
PADDING_COMPARE = CATALOGUE.mistake("padding_compare")
PADDING_MASK_INVERTED = CATALOGUE.mistake("padding_mask_inverted")
PADDING_MASK_NO_QUERY_DIM = CATALOGUE.mistake("padding_mask_no_query_dim")
PADDING_MASK_ON_QUERIES = CATALOGUE.mistake("padding_mask_on_queries")
SOFTMAX_NAN_BLOCKED_ROW = CATALOGUE.mistake("softmax_nan_blocked_row")
SWAPPED_RETURN = CATALOGUE.mistake(
    "swapped_return",
    'it returns (weights, output); return them in the order (output, weights).')
OUTPUT_NOT_FROM_WEIGHTS = CATALOGUE.mistake(
    "output_not_from_weights",
    'the weights returned are not the ones the output was computed with: return the weights that made the'
    ' output (after masking and dropout), and compute output = weights @ v.')
DROPOUT_NO_RESCALE = CATALOGUE.mistake(
    "dropout_no_rescale",
    'the weights that survive dropout must be divided by (1 - dropout_p), so the expected output is '
    'unchanged (F.dropout does this).')
DROPOUT_RESCALE_BY_P = CATALOGUE.mistake(
    "dropout_rescale_by_p",
    'the weights that survive dropout must be divided by (1 - dropout_p), the probability of keeping '
    'them, not by dropout_p.')
