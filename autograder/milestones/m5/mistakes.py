"""Milestone 5's CATALOGUE and the mistakes its checks recognise from evidence: see diagnosis.Catalogue."""
from pathlib import Path

from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m5", Path(__file__).with_name("deviations.yaml"))

# Plain mistakes (id only), one CATALOGUE.plain call a topic rather than a same-shaped line each; NAME = id.upper().
ADAM_SETTINGS, BASE_LR = CATALOGUE.plain("adam_settings", "base_lr")
BATCH_DTYPE, BATCH_NOT_DICT = CATALOGUE.plain("batch_dtype", "batch_not_dict")
DOES_NOT_LEARN, EVAL_MODE_IN_TRAIN = CATALOGUE.plain("does_not_learn", "eval_mode_in_train")
EVALUATE_IN_TRAIN_MODE, EVALUATE_MODE_NOT_RESTORED, EVALUATE_WITH_GRAD = CATALOGUE.plain(
    "evaluate_in_train_mode", "evaluate_mode_not_restored", "evaluate_with_grad")
GRAPH_CUT, INPUT_MODIFIED = CATALOGUE.plain("graph_cut", "input_modified")
LOSS_NOT_SCALAR, LOSS_RETURNED_AS_TENSOR, WRONG_LOSS_RETURNED = CATALOGUE.plain(
    "loss_not_scalar", "loss_returned_as_tensor", "wrong_loss_returned")
OPTIMIZER_KIND, SCHEDULER_VALUES = CATALOGUE.plain("optimizer_kind", "scheduler_values")
TOKENIZER_DECODE, TOKENIZER_ENCODE, TOKENIZER_SPECIALS, TOKENIZER_UNSORTED, TOKENIZER_VOCAB_SIZE = CATALOGUE.plain(
    "tokenizer_decode", "tokenizer_encode", "tokenizer_specials", "tokenizer_unsorted", "tokenizer_vocab_size")
NOAM_OFF_BY_ONE = CATALOGUE.mistake(
    "noam_off_by_one",
    'the schedule is one step ahead: noam_lr(step) uses `step` itself (step 0 counts as step 1).')
NOAM_STEP_ZERO = CATALOGUE.mistake("noam_step_zero", 'step 0 must count as step 1: step = max(step, 1).')
EVALUATE_NO_TOKENS = CATALOGUE.mistake(
    "evaluate_no_tokens",
    "the total is divided by the number of non-pad target tokens, which is 0 here: when no batch has one (or "
    "`batches` is empty) evaluate returns float('nan'), never a ZeroDivisionError (the docstring), e.g. "
    "return total / count if count else math.nan.")
MEAN_OF_BATCH_MEANS = CATALOGUE.mistake(
    "mean_of_batch_means",
    'this is the mean of the per-batch means; divide the total loss of all non-pad tokens by their number'
    ' (batches with more tokens weigh more).')
NOAM_FACTOR_IGNORED = CATALOGUE.mistake(
    "noam_factor_ignored",
    '`factor` multiplies the whole learning rate.')
OPTIMIZER_FACTOR_IGNORED = CATALOGUE.mistake(
    "optimizer_factor_ignored",
    "make_optimizer's schedule leaves out its `factor` argument: the LambdaLR must give "
    "noam_lr(s, d_model, warmup_steps, factor).")
TOKENIZER_UNKNOWN_CRASH = CATALOGUE.mistake(
    "tokenizer_unknown_crash",
    "encode looks each character up without a fallback, so a character that is not in the vocabulary raises: "
    "it must give unk_id (3), e.g. self.stoi.get(c, self.unk_id).")
RETURNS_UNSMOOTHED = CATALOGUE.mistake(
    "returns_unsmoothed_loss",
    "train_step returns the cross-entropy without label smoothing; it returns the loss it stepped on, "
    "label_smoothed_cross_entropy(logits, tgt_out, smoothing, pad_id).item().")
TRAIN_MODE_BY_FLAG = CATALOGUE.mistake(
    "train_mode_by_flag",
    "model.training = True changes only the top module's flag; its submodules (the dropout layers among them) "
    "stay in eval mode: call model.train(), which sets every submodule.")
GRAD_DTYPE_CHANGED = CATALOGUE.mistake(
    "grad_dtype_changed",
    "a parameter's .grad was replaced by a tensor of another dtype (a float64 tensor made inside train_step, "
    "e.g. torch.zeros(1, dtype=torch.float64), promotes float32 gradients): keep the parameters' dtype, or clip "
    "with torch.nn.utils.clip_grad_norm_, which does.")

ALL_PAD_LOSS_ZERO = CATALOGUE.mistake(
    "all_pad_loss_zero",
    "the 0 / 0 of a batch with no non-pad target is turned into 0 (a count clamped to at least 1, or a special "
    "case): divide the summed cost by the number of non-pad positions as it is, so that, like F.cross_entropy, the "
    "loss is NaN then.")
# decode's own known mistakes, each checked by rewriting the ids the way it reads them (checks.tokenizer)
DECODE_PAST_EOS = CATALOGUE.mistake(
    "decode_past_eos", "decode skips <eos> like <pad> and <bos> and reads on, so what follows the first <eos> ends up "
    "in the text: stop at the first eos_id (break), and skip only pad_id and bos_id.")
DECODE_STOPS_AT_PAD = CATALOGUE.mistake(
    "decode_stops_at_pad", "decode stops at <pad> as at <eos>; only the first eos_id ends the text, a pad_id is "
    "skipped and reading goes on.")
