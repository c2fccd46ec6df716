"""Milestone 5's known mistakes: CATALOGUE (the mistakes the judge recomputes are declared beside their
computations in answers.py, with @CATALOGUE.entry) and the mistakes a check recognises from its own evidence,
declared here. A declaration without text: the check's message says it."""
from autograder.grading.diagnosis import Catalogue

CATALOGUE = Catalogue("m5")

ADAM_SETTINGS = CATALOGUE.mistake("adam_settings")
BASE_LR = CATALOGUE.mistake("base_lr")
BATCH_DTYPE = CATALOGUE.mistake("batch_dtype")
BATCH_NOT_DICT = CATALOGUE.mistake("batch_not_dict")
DOES_NOT_LEARN = CATALOGUE.mistake("does_not_learn")
EVAL_MODE_IN_TRAIN = CATALOGUE.mistake("eval_mode_in_train")
EVALUATE_IN_TRAIN_MODE = CATALOGUE.mistake("evaluate_in_train_mode")
EVALUATE_MODE_NOT_RESTORED = CATALOGUE.mistake("evaluate_mode_not_restored")
EVALUATE_WITH_GRAD = CATALOGUE.mistake("evaluate_with_grad")
GRAPH_CUT = CATALOGUE.mistake("graph_cut")
INPUT_MODIFIED = CATALOGUE.mistake("input_modified")
LOSS_NOT_SCALAR = CATALOGUE.mistake("loss_not_scalar")
LOSS_RETURNED_AS_TENSOR = CATALOGUE.mistake("loss_returned_as_tensor")
NOAM_OFF_BY_ONE = CATALOGUE.mistake(
    "noam_off_by_one",
    'the schedule is one step ahead: noam_lr(step) uses `step` itself (step 0 counts as step 1).')
NOAM_STEP_ZERO = CATALOGUE.mistake("noam_step_zero", 'step 0 must count as step 1: step = max(step, 1).')
OPTIMIZER_KIND = CATALOGUE.mistake("optimizer_kind")
SCHEDULER_VALUES = CATALOGUE.mistake("scheduler_values")
TOKENIZER_DECODE = CATALOGUE.mistake("tokenizer_decode")
TOKENIZER_ENCODE = CATALOGUE.mistake("tokenizer_encode")
TOKENIZER_SPECIALS = CATALOGUE.mistake("tokenizer_specials")
TOKENIZER_UNSORTED = CATALOGUE.mistake("tokenizer_unsorted")
TOKENIZER_VOCAB_SIZE = CATALOGUE.mistake("tokenizer_vocab_size")
WRONG_LOSS_RETURNED = CATALOGUE.mistake("wrong_loss_returned")
MEAN_OF_BATCH_MEANS = CATALOGUE.mistake(
    "mean_of_batch_means",
    'this is the mean of the per-batch means; divide the total loss of all non-pad tokens by their number'
    ' (batches with more tokens weigh more).')
NOAM_FACTOR_IGNORED = CATALOGUE.mistake(
    "noam_factor_ignored",
    '`factor` multiplies the whole learning rate.')

# train_step's known mistakes: each is the judge's own training step (answers.judge_steps) with these switches.
STEP_MISTAKES = {
    "no_zero_grad": ("the gradients are never zeroed, so they pile up across steps: call optimizer.zero_grad() "
                     "at the start of train_step.", {"skip_zero": True}),
    "zero_grad_after_backward": ("the gradients are zeroed after backward(), so the optimizer steps on zeros: zero "
                                 "them before the forward pass.", {"zero_late": True}),
    "scheduler_before_optimizer": ("scheduler.step() runs before optimizer.step(), so every step uses the next "
                                   "step's learning rate: step the optimizer first.", {"sched_first": True}),
    "loss_on_tgt_in": ("the loss compares the logits with tgt_in; the targets are tgt_out (the next tokens).",
                       {"loss_on_tgt_in": True}),
    "clip_after_step": ("the gradients are clipped after optimizer.step(), when they no longer matter: clip between "
                        "backward() and optimizer.step().", {"clip_late": True}),
}
STEP_DEVIATIONS = [(CATALOGUE.mistake(k, text), dev) for k, (text, dev) in STEP_MISTAKES.items()]
