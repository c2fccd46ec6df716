"""Milestone 1's CATALOGUE and the mistakes its checks recognise from evidence: see diagnosis.Catalogue."""
from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m1")

# Plain mistakes (id only), one CATALOGUE.plain call a topic rather than a same-shaped line each; NAME = id.upper().
CAUSAL_IGNORES_DEVICE, CAUSAL_INVERTED, CAUSAL_NO_DIAGONAL, CAUSAL_TRANSPOSED = CATALOGUE.plain(
    "causal_ignores_device", "causal_inverted", "causal_no_diagonal", "causal_transposed")
DROPOUT_BEFORE_SOFTMAX, DROPOUT_IGNORED, DROPOUT_KEEP_PROBABILITY = CATALOGUE.plain(
    "dropout_before_softmax", "dropout_ignored", "dropout_keep_probability")
GRAPH_CUT, INPUT_MODIFIED = CATALOGUE.plain("graph_cut", "input_modified")
DTYPE_CHANGED, = CATALOGUE.observed("dtype_changed")   # seen in what comes back: charged once, like a reproduced one
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
# Its computation: the mask a student who made it returns, for the same tokens and pad_id.
PADDING_MASK_BLOCKS_ZERO = CATALOGUE.mistake(
    "padding_mask_blocks_zero",
    "the mask blocks the id 0 as well as pad_id ((tokens != pad_id) & (tokens != 0)): only pad_id is padding, "
    "and when pad_id is another id, 0 is a real token. Use tokens != pad_id alone.",
    reproduce=lambda tokens, pad_id: ((tokens != pad_id) & (tokens != 0)).unsqueeze(1))
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
DROPOUT_ON_OUTPUT = CATALOGUE.mistake(
    "dropout_on_output",
    "dropout is applied to the output (weights @ v), and the weights returned are the ones before dropout: drop the "
    "attention weights themselves, then compute output = weights @ v with the dropped weights and return those.")
DROPOUT_RENORMALISED = CATALOGUE.mistake(
    "dropout_renormalised",
    "dropout acts before the softmax (dropped keys get -inf, as in DropKey), so the softmax hands their weight to the "
    "kept keys and each row still sums to 1: apply dropout to the weights after the softmax, zeroing the dropped ones "
    "and dividing the kept ones by (1 - dropout_p) (torch.nn.functional.dropout(weights, p=dropout_p)).")
# Its computation: the right weights times one keep pattern (read from the answer) that broadcasts over the leading
# dims where the student's pattern never changes, rescaled by 1 / (1 - p); the check names it only when that gives
# the student's weights. The check says which dims share it when not all of them do (saying()).
DROPOUT_MASK_SHARED = CATALOGUE.mistake(
    "dropout_mask_shared",
    "the dropout mask is drawn once with shape [Lq, Lk] and broadcast, so every batch item and every head drops the "
    "same weights: drop each weight independently, with a mask of the weights' full shape "
    "(torch.rand_like(weights) >= dropout_p), or call torch.nn.functional.dropout(weights, p=dropout_p).",
    reproduce=lambda right, keep, p: right * keep / (1 - p))
