"""Milestone 2's CATALOGUE and the mistakes its checks recognise from evidence: see diagnosis.Catalogue."""
import torch

from autograder.grading.diagnosis import Catalogue

PROJECTIONS = ("w_q", "w_k", "w_v", "w_o")

CATALOGUE = Catalogue("m2")

# Plain mistakes (id only), one CATALOGUE.plain call a topic rather than a same-shaped line each; NAME = id.upper().
DROPOUT_IN_EVAL, DROPOUT_NEVER, DROPOUT_NOT_ON_WEIGHTS = CATALOGUE.plain(
    "dropout_in_eval", "dropout_never", "dropout_not_on_weights")
ERROR_WITHOUT_NUMBERS, GRAPH_CUT, INPUT_MODIFIED = CATALOGUE.plain(
    "error_without_numbers", "graph_cut", "input_modified")
NO_DIVISIBILITY_CHECK, PARAMETER_NAMES, RANDOM_FORWARD, VALID_CONFIG_REJECTED = CATALOGUE.plain(
    "no_divisibility_check", "parameter_names", "random_forward", "valid_config_rejected")
WEIGHTS_NOT_DETACHED, WEIGHTS_NOT_STORED = CATALOGUE.plain("weights_not_detached", "weights_not_stored")
WRONG_EXCEPTION, WRONG_HEAD_COUNT = CATALOGUE.plain("wrong_exception", "wrong_head_count")
BIAS_IGNORED = CATALOGUE.mistake(
    "bias_ignored",
    '`bias=False` must create the projections without a bias: nn.Linear(d_model, d_model, bias=bias).',
    # the judge's answer with the biases the student's projections kept (a projection without one: zeros)
    reproduce=lambda answer, params, kept, *call: answer({**params, **{
        f"{n}.bias": kept.get(f"{n}.bias", torch.zeros_like(params[f"{n}.weight"][0])) for n in PROJECTIONS}}, *call))
WEIGHTS_AVERAGED = CATALOGUE.mistake(
    "weights_averaged",
    '`self.attn_weights` must keep every head: [B, H, Lq, Lk], not an average over heads.',
    reproduce=lambda per_head: per_head.mean(dim=1))          # [B, H, Lq, Lk] -> [B, Lq, Lk]
# A projection the output never uses (its weights get no gradient), one per projection.
NEVER_USED = {name: CATALOGUE.mistake(f"{name}_never_used", f"`{name}` is never used: its weights get no gradient, "
                                      f"so the output does not depend on them.")
              for name in ("w_q", "w_k", "w_v", "w_o")}
# Dropout in training mode, computed from what the student's own dropout kept (`kept`: the entries that are not 0),
# since the judge cannot replay the student's random draws; `weights`/`output`: the values before dropout.
DROPOUT_KEEP_PROBABILITY = CATALOGUE.mistake(
    "dropout_keep_probability",
    "`dropout` is the probability of dropping a weight (as in nn.Dropout), not of keeping one: in training mode "
    "pass dropout_p=self.dropout to scaled_dot_product_attention, not 1 - self.dropout.",
    # dropout_p = 1 - p: the weights kept are scaled by 1 / (1 - (1 - p)) = 1 / p
    reproduce=lambda weights, kept, p: torch.where(kept, weights / p, torch.zeros_like(weights)))
DROPOUT_ON_OUTPUT_TOO = CATALOGUE.mistake(
    "dropout_on_output_too",
    "besides the dropout on the attention weights, the output goes through a second dropout (after w_o, like "
    "nanoGPT's resid_dropout): MultiHeadAttention applies dropout to the attention weights only, and returns "
    "w_o(merge_heads(weights @ v)) computed with the weights it stores; dropout on a sub-layer's output belongs "
    "to the layer that uses it (milestone 3).",
    # nn.Dropout(p) on w_o's output: entries zeroed, the others scaled by 1 / (1 - p)
    reproduce=lambda output, kept, p: torch.where(kept, output / (1 - p), torch.zeros_like(output)))
