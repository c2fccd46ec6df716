"""Helpers of the public tests of milestone 3: the words they share with the hidden grader.

Generated from the course's sources (your edits here would be overwritten by the next release).
GROUPS names the hidden check group a failing test stands for; CAUSES holds the grader's own
sentence for each likely mistake the public tests recognise: the same words your report shows.
"""
import contextlib
import functools
import inspect

import torch
from torch.overrides import TorchFunctionMode

MEASURED_SECONDS = 1.4   # cold `pytest -q` here, reference files, 2 cores (median of 3)

GROUPS = {
    'layer_norm': (3, 'LayerNorm vs torch.nn.LayerNorm: any leading dims, biased variance, eps inside the sqrt and the eps you are given (inputs with a large mean and tiny spread), float32 and float64, parameters weight and bias, the input left unchanged'),
    'feed_forward': (2, 'linear2(activation(linear1(x))) in eval mode, with relu and the exact gelu (where its dropout goes: `dropout`)'),
    'encoder_layer': (3, 'EncoderLayer vs torch.nn.TransformerEncoderLayer with the same weights: post-LN and pre-LN, relu and gelu, masks, float32; the inputs left unchanged'),
    'decoder_layer': (3, 'DecoderLayer vs torch.nn.TransformerDecoderLayer: causal and padding masks, Ls != Lt, post-LN and pre-LN, float32; the inputs left unchanged'),
    'gradients': (2, "gradients of every parameter and of the inputs (x, memory) match PyTorch's"),
    'behaviour': (2, 'the decoder never looks ahead under a causal mask, padded source positions change nothing, batch items are independent, eval mode is deterministic'),
    'dropout': (2, "in training mode: dropout on each sub-layer's output before the residual add (not on the sum) and inside the feed-forward; the layer's dropout reaches its attention"),
    'structure': (1, 'submodules self_attn, cross_attn, feed_forward, norm1..norm3 of the right kinds; norm_first kept; ValueError naming relu and gelu for any other activation'),
    'vectorization': (1, 'no Python loops over batch or positions'),
    'from_scratch': (1, 'none of the forbidden functions below'),
}

CAUSES = {
    'activation_not_passed': "the layer builds its feed_forward without `activation`, so it always uses FeedForward's default relu: FeedForward(d_model, d_ff, dropout, activation).",
    'affine_ignored': 'the learned weight and bias are not applied: y = x_hat * weight + bias.',
    'eps_ignored': 'the `eps` given to the constructor is not used (1e-5 is used whatever eps says): store it (self.eps = eps) and add self.eps inside the square root.',
    'eps_outside_sqrt': 'eps is added outside the square root (std + eps); it belongs inside: (x - mean) / sqrt(var + eps). The difference is tiny at unit scale but large when the features vary little.',
    'ffn_activation_after_linear2': 'the activation is applied after linear2; it goes between the two linear layers: linear2(dropout(activation(linear1(x)))).',
    'ffn_activation_ignored': 'the `activation` argument is not followed (relu and gelu are swapped or one is always used).',
    'ffn_no_activation': 'the activation is missing: linear2(dropout(activation(linear1(x)))).',
    'ffn_tanh_gelu': "this is the tanh approximation of GELU; use the exact one: F.gelu(h) (approximate='none').",
    'norm_first_ignored': 'norm_first is not followed: norm_first=True is pre-LN (normalise before each sub-layer), False is post-LN (normalise after the residual add).',
    'normalises_last_two_dims': "the statistics run over the last two dimensions; LayerNorm normalises each position's features only: mean and variance over dim=-1.",
    'normalises_whole_tensor': 'one mean and variance are taken over the whole tensor; each position needs its own, over its features: mean and variance over dim=-1 (keepdim=True).',
    'src_mask_ignored': 'src_mask is not passed on: the attention to the source must get it (encoder: self_attn(..., src_mask); decoder: cross_attn(..., src_mask)).',
    'tgt_mask_added': 'with tgt_mask=None the self-attention must see every position: a mask that is None means no mask (the caller passes the causal mask; none is added inside the layer).',
    'tgt_mask_ignored': 'the self-attention ignores tgt_mask, so the decoder sees future positions: self_attn(x, x, x, tgt_mask).',
    'unbiased_variance': 'the variance is the unbiased one (divided by d_model - 1); LayerNorm uses the biased variance: ((x - mean) ** 2).mean(-1) or x.var(-1, unbiased=False).',
    'variance_by_moments': 'the variance is computed as E[x^2] - E[x]^2: when the mean is large compared with the spread, the two terms are nearly equal and their difference keeps few correct digits (catastrophic cancellation), even in float64. Compute it as the mean of the squared deviations: ((x - mean) ** 2).mean(-1, keepdim=True).',
    'weight_bias_swapped': 'weight and bias are swapped: y = x_hat * weight + bias.',
}

# the public tests whose failure messages name each group (what check(group) runs)
TESTS_OF_GROUP = {
    'layer_norm': ['test_layernorm_parameters', 'test_layernorm_matches_pytorch', 'test_layernorm_uses_its_eps', 'test_layernorm_keeps_float32'],
    'feed_forward': ['test_feedforward', 'test_feedforward_dropout_on_hidden_activations', 'test_layer_dropout_reaches_attention_and_feed_forward'],
    'encoder_layer': ['test_encoder_layer_matches_pytorch', 'test_layers_without_masks_match_pytorch', 'test_layers_in_float32', 'test_layers_leave_their_inputs_unchanged'],
    'decoder_layer': ['test_decoder_layer_matches_pytorch', 'test_layers_without_masks_match_pytorch', 'test_layers_in_float32', 'test_layers_leave_their_inputs_unchanged'],
    'gradients': ['test_gradients_reach_everything'],
    'behaviour': ['test_decoder_layer_does_not_look_ahead_with_a_causal_mask', 'test_eval_mode_has_no_dropout', 'test_residual_dropout_on_each_sublayer_output'],
    'dropout': ['test_feedforward_dropout_on_hidden_activations', 'test_eval_mode_has_no_dropout', 'test_residual_dropout_on_each_sublayer_output', 'test_layer_dropout_reaches_attention_and_feed_forward'],
    'structure': ['test_rejects_unknown_activation', 'test_encoder_layer_matches_pytorch', 'test_decoder_layer_matches_pytorch', 'test_submodule_names'],
    'vectorization': ['test_no_loops'],
    'from_scratch': ['test_no_forbidden_functions'],
}

FORBIDDEN = [
    ('all', ['layer_norm', 'nn.LayerNorm', 'aten::native_layer_norm*', 'aten::layer_norm*'], "PyTorch's own layer normalisation (torch.nn.LayerNorm, torch.nn.functional.layer_norm)"),
    ('all', ['nn.Transformer*', 'aten::_transformer_encoder_layer_fwd*'], "PyTorch's own Transformer layers (torch.nn.TransformerEncoderLayer and its relatives)"),
    ('all', ['scaled_dot_product_attention', 'multi_head_attention_forward', 'nn.MultiheadAttention', 'aten::_scaled_dot_product*', 'aten::scaled_dot_product*', 'aten::_native_multi_head_attention*'], "PyTorch's own attention (torch.nn.MultiheadAttention, F.scaled_dot_product_attention): use the MultiHeadAttention of multihead.py"),
]


def group(name):
    """The words for a hidden check group: its name, points and what it checks (course.yaml), e.g.
    "hidden check group `shapes` (1 point: ...)"."""
    points = GROUPS[name][0]
    return f"hidden check group `{name}` ({points} point{'s' if points != 1 else ''}: {GROUPS[name][1]})"


def cause(mistake_id):
    """The grader's likely-cause sentence for one known mistake."""
    return "Likely cause: " + CAUSES[mistake_id]


def check(group_name):
    """Run the public tests of one hidden check group on the files of this folder (the notebook's
    Autograded cells call this) and print: passed, or the first failure's message. The tests run in a
    fresh Python process: they see your files as saved now, and nothing they do stays in your notebook."""
    import os
    import subprocess
    import sys
    folder = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, '-c', f'import testkit; testkit._check_here({group_name!r})'],
                          cwd=folder, capture_output=True, text=True)
    print(done.stdout.rstrip() or 'The public tests could not run: ' + (done.stderr.strip().splitlines() or
                                                                        ['no output'])[-1])


def _check_here(group_name):
    import os
    import pytest

    class _Collect:
        def __init__(self):
            self.passed, self.failed = 0, []

        def pytest_collectreport(self, report):
            if report.failed:
                self.failed.append(report)

        def pytest_runtest_logreport(self, report):
            if report.failed:
                self.failed.append(report)
            elif report.when == 'call' and report.passed:
                self.passed += 1

    names = TESTS_OF_GROUP.get(group_name, [])
    points = GROUPS[group_name][0]
    print(f"Public tests for `{group_name}` ({points} point{'s' if points != 1 else ''}): ", end='')
    if not names:
        print('no public test names this group yet; run `pytest -q` in this folder for all of them.')
    else:
        folder = os.path.dirname(os.path.abspath(__file__))
        collect = _Collect()
        # pytest's own report off (no dots, no colour codes): this cell prints one plain line.
        code = pytest.main(['-x', '-p', 'no:cacheprovider', '-p', 'no:terminal', '-k', ' or '.join(names),
                            folder], plugins=[collect])
        if collect.failed:
            print(f'FAILED {collect.failed[0].nodeid.split("::")[-1] or "(collecting the tests)"}:',
                  _message(collect.failed[0]))
        elif code != 0 or not collect.passed:
            print(f'the tests did not run (pytest exit code {int(code)}); run `pytest -q` in this folder to see why.')
        else:
            print(f'{collect.passed} passed.')
    print('The hidden checks decide the points for this group when your work is graded: they test more than the',
          'public tests do, so a pass here is a good sign, not a promise.')


def _message(report):
    """A failed test's own message (the assertion's text, or the exception), without pytest's markup."""
    crash = getattr(report.longrepr, 'reprcrash', None)
    text = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1]
    text = text.split('\nassert ')[0]
    text = text[len('E '):].strip() if text.startswith('E ') else text
    return text[len('AssertionError: '):] if text.startswith('AssertionError: ') else text


_EXPECTED = []   # (exception type, where) a test expects, inside `expecting`: they pass through `guarded`


def describe(value):
    """A value in a few words: a tensor as its shape and dtype."""
    if isinstance(value, torch.Tensor):
        return f"[{', '.join(map(str, value.shape))}] {str(value.dtype).replace('torch.', '')}"
    return repr(value)


def guarded(fn, copies=False):
    """Your function or method, called as usual; if it raises, the test fails with one sentence saying which
    call failed with which inputs (the original traceback is printed above it). With copies=True your code gets
    copies of the tensor arguments, so an input changed in place fails only the test that looks for that."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if copies:
            args, kwargs = _copied(args), dict(zip(kwargs, _copied(kwargs.values())))
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if any(isinstance(e, error) for error, _ in _EXPECTED):
                raise
            import pytest
            try:
                items = inspect.signature(fn).bind(*args, **kwargs).arguments.items()
            except TypeError:
                items = [*((None, a) for a in args), *kwargs.items()]
            inputs = ', '.join(describe(v) if k is None else f'{k}={describe(v)}' for k, v in items if k != 'self')
            wanted = ''.join(f' ({error.__name__} expected here) {where}'.rstrip() for error, where in _EXPECTED[-1:])
            raise pytest.fail.Exception(f'{fn.__qualname__}({inputs}) raised {type(e).__name__}: {e}{wanted}') from e
    return call


def _copied(values):
    """The values with every tensor cloned (still connected to autograd), not counted by TorchCalls."""
    global _COPYING
    _COPYING = True
    try:
        return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
    finally:
        _COPYING = False


_COPYING = False


@contextlib.contextmanager
def expecting(error, where=''):
    """Inside `with expecting(ValueError, where):`, that error passes through `guarded`; another one fails the
    test saying that `error` was expected, and `where` (the hidden check group)."""
    _EXPECTED.append((error, where))
    try:
        yield
    finally:
        _EXPECTED.pop()


class TorchCalls(TorchFunctionMode):
    """Counts the torch functions called inside `with TorchCalls() as calls:`; calls.names lists them."""

    def __enter__(self):
        self.names = []
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not _COPYING:
            self.names.append(getattr(func, '__name__', str(func)))
        return func(*args, **(kwargs or {}))

    @property
    def count(self):
        return len(self.names)
