"""Milestone 2's CATALOGUE and the mistakes its checks recognise from evidence: see diagnosis.Catalogue."""
import torch

from autograder.grading.diagnosis import Catalogue

PROJECTIONS = ("w_q", "w_k", "w_v", "w_o")

CATALOGUE = Catalogue("m2")

# Plain mistakes (id only), one CATALOGUE.plain call a topic rather than a same-shaped line each; NAME = id.upper().
DROPOUT_IN_EVAL, DROPOUT_KEEP_PROBABILITY, DROPOUT_NEVER, DROPOUT_NOT_ON_WEIGHTS = CATALOGUE.plain(
    "dropout_in_eval", "dropout_keep_probability", "dropout_never", "dropout_not_on_weights")
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
