"""Milestone 1's CATALOGUE and the mistakes its checks recognise from evidence: see diagnosis.Catalogue."""
from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m1")

# Plain mistakes (id only), one CATALOGUE.plain call a topic rather than a same-shaped line each; NAME = id.upper().
CAUSAL_IGNORES_DEVICE, CAUSAL_INVERTED, CAUSAL_NO_DIAGONAL, CAUSAL_TRANSPOSED = CATALOGUE.plain(
    "causal_ignores_device", "causal_inverted", "causal_no_diagonal", "causal_transposed")
DROPOUT_BEFORE_SOFTMAX, DROPOUT_IGNORED, DROPOUT_KEEP_PROBABILITY = CATALOGUE.plain(
    "dropout_before_softmax", "dropout_ignored", "dropout_keep_probability")
DTYPE_CHANGED, GRAPH_CUT, INPUT_MODIFIED = CATALOGUE.plain("dtype_changed", "graph_cut", "input_modified")
NAN_GRADIENT_BLOCKED_ROW = CATALOGUE.mistake(
    "nan_gradient_blocked_row",
    "the forward pass computes a NaN for a row whose keys are all blocked (-inf - (-inf), or 0 / 0) and replaces "
    "it with 0 afterwards (nan_to_num, torch.where or masked_fill on the result): the values come out right, but "
    "the NaN still flows back in backward(). Avoid making it: shift an all -inf slice by 0 instead of by its max, "
    "and divide by 1 where the sum is 0.")
MASK_NOT_BOOL, NAN_BLOCKED_ROW, SOFTMAX_NAN_BLOCKED_ROW = CATALOGUE.plain(
    "mask_not_bool", "nan_blocked_row", "softmax_nan_blocked_row")
PADDING_COMPARE, PADDING_MASK_INVERTED, PADDING_MASK_NO_QUERY_DIM, PADDING_MASK_ON_QUERIES = CATALOGUE.plain(
    "padding_compare", "padding_mask_inverted", "padding_mask_no_query_dim", "padding_mask_on_queries")
PADDING_MASK_IGNORES_PAD_ID = CATALOGUE.mistake(
    "padding_mask_ignores_pad_id",
    'the mask compares the ids with 0 (tokens != 0 or tokens > 0), not with the pad_id argument: use '
    'tokens != pad_id.')
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
