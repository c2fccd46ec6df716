"""Milestone 4's CATALOGUE and the mistakes its checks recognise from evidence: see diagnosis.Catalogue."""
from pathlib import Path

from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m4", Path(__file__).with_name("deviations.yaml"))

# Plain mistakes (id only), one CATALOGUE.plain call a topic rather than a same-shaped line each; NAME = id.upper().
BATCH_MIXING, DECODE_ARGUMENT_ORDER, DROPOUT_IN_EVAL, DROPOUT_NOT_PASSED = CATALOGUE.plain(
    "batch_mixing", "decode_argument_order", "dropout_in_eval", "dropout_not_passed")
GRAPH_CUT, INPUT_MODIFIED = CATALOGUE.plain("graph_cut", "input_modified")
LAYER_COUNT, LAYERS_NOT_MODULELIST, LOOKS_AHEAD, MAX_LEN_NOT_PASSED = CATALOGUE.plain(
    "layer_count", "layers_not_modulelist", "looks_ahead", "max_len_not_passed")
NORMS_REINITIALISED, NOT_XAVIER, PADDING_NOT_IGNORED = CATALOGUE.plain(
    "norms_reinitialised", "not_xavier", "padding_not_ignored")
PARAMETER_COUNT, PARAMETER_NAMES, SHARED_SUBMODULE = CATALOGUE.plain(
    "parameter_count", "parameter_names", "shared_submodule")
(PE_BUFFER_BATCH_DIM, PE_DROPOUT, PE_DTYPE, PE_LENGTH_ERROR, PE_LENGTH_OFF_BY_ONE, PE_MAX_LEN_IGNORED,
 PE_MODULE_DTYPE, PE_NOT_BUFFER, PE_ODD_ACCEPTED, PE_ODD_WRONG_ERROR, PE_MODIFIED) = CATALOGUE.plain(
    "pe_buffer_batch_dim", "pe_dropout", "pe_dtype", "pe_length_error", "pe_length_off_by_one", "pe_max_len_ignored",
    "pe_module_dtype", "pe_not_buffer", "pe_odd_accepted", "pe_odd_wrong_error", "pe_modified")
TIE_DIFFERENT_VOCABS, TIED_BY_DEFAULT, TYING_BY_COPY, TYING_PARTIAL = CATALOGUE.plain(
    "tie_different_vocabs", "tied_by_default", "tying_by_copy", "tying_partial")
PE_BATCH_DIM = CATALOGUE.mistake(
    "pe_batch_dim",
    "the table has a batch dimension in front ([1, max_len, d_model], as pe.unsqueeze(0) gives): return [max_len, "
    "d_model]; the rows pe[:L] broadcast over the batch when PositionalEncoding adds them.",
    reproduce=lambda table: table.unsqueeze(0))
PE_DROPOUT_ON_TABLE = CATALOGUE.mistake(
    "pe_dropout_on_table",
    "dropout is applied to the table before the add (x + self.dropout(self.pe[:L])), so the embeddings are never "
    "dropped and some positions are lost; it acts on the sum: return self.dropout(x + self.pe[:L]).")
# Its computation is the student's own decode with the two masks swapped (run in the worker by the check).
FORWARD_MASKS_SWAPPED = CATALOGUE.mistake(
    "forward_masks_swapped",
    "forward passes the masks to decode in the wrong order (decode(tgt, memory, tgt_mask, src_mask)): decode's "
    "signature is (tgt, memory, src_mask, tgt_mask), so the self-attention gets the source's padding mask and the "
    "cross-attention the target's mask. Call self.decode(tgt, memory, src_mask, tgt_mask).",
    reproduce=lambda decode, tgt, memory, src_mask, tgt_mask: decode(tgt, memory, tgt_mask, src_mask))
