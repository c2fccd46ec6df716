"""Helpers of the public tests of milestone 2: the words they share with the hidden grader.

Generated from the course's sources (your edits here would be overwritten by the next release).
GROUPS names the hidden check group a failing test stands for; CAUSES holds the grader's own
sentence for each likely mistake the public tests recognise: the same words your report shows.
"""
import contextlib
import functools
import inspect

import torch
from torch.overrides import TorchFunctionMode

MEASURED_SECONDS = 1.3   # cold `pytest -q` here, reference files, 2 cores (median of 3)

GROUPS = {
    'shapes': (2, 'output [B, Lq, d_model] and attn_weights [B, H, Lq, Lk] for many shapes (right values too); inputs not modified'),
    'split_merge': (2, 'split_heads and merge_heads: head h holds features h*d_k:(h+1)*d_k; merge inverts split'),
    'parity': (4, 'same output as torch.nn.MultiheadAttention with the same weights: masks, cross-attention, no bias, float32'),
    'head_weights': (2, 'self.attn_weights: per-head weights [B, H, Lq, Lk], detached'),
    'dropout': (2, 'dropout on the attention weights only, at the rate given (0.5 and 0.2), in training mode only; the output is computed with the stored (dropped) weights'),
    'gradients': (2, "gradients of all four projections and of query, key and value match PyTorch's"),
    'vectorization': (2, 'no Python loops over batch, heads or positions'),
    'from_scratch': (2, 'none of the forbidden functions below'),
    'init_errors': (2, 'ValueError, giving both numbers, when num_heads does not divide d_model (and only then); parameters w_q, w_k, w_v, w_o (with or without bias)'),
}

CAUSES = {
    'bias_ignored': '`bias=False` must create the projections without a bias: nn.Linear(d_model, d_model, bias=bias).',
    'dropout_keep_probability': '`dropout` is the probability of dropping a weight (as in nn.Dropout), not of keeping one: in training mode pass dropout_p=self.dropout to scaled_dot_product_attention, not 1 - self.dropout.',
    'dropout_on_output_too': "besides the dropout on the attention weights, the output goes through a second dropout (after w_o, like nanoGPT's resid_dropout): MultiHeadAttention applies dropout to the attention weights only, and returns w_o(merge_heads(weights @ v)) computed with the weights it stores; dropout on a sub-layer's output belongs to the layer that uses it (milestone 3).",
    'keys_values_swapped': 'keys and values are swapped: k = w_k(key) and v = w_v(value).',
    'mask_no_head_dim': 'a [B, Lq, Lk] or [B, 1, Lk] mask must get a head dimension (mask.unsqueeze(-3)) before it meets the scores [B, H, Lq, Lk]; without it, the batch lines up with the heads.',
    'mask_unsqueeze_always': 'unsqueeze(1) turns a 2-D causal mask [Lq, Lk] into [Lq, 1, Lk], which lines the queries up with the heads: mask.unsqueeze(-3) gives [1, Lq, Lk] for it and [B, 1, Lq, Lk] for a 3-D mask.',
    'merge_no_transpose': 'merge_heads flattens [B, H, L, d_k] without moving the head dimension back after the length: transpose(1, 2) first, then reshape to [B, L, H*d_k].',
    'split_interleaved': 'head h must hold features h*d_k:(h+1)*d_k (contiguous blocks), not every H-th feature: reshape to [B, L, H, d_k], not [B, L, d_k, H].',
    'split_plain_view': 'split_heads views [B, L, d_model] straight as [B, H, L, d_k], which mixes positions into heads: reshape to [B, L, H, d_k] first, then transpose(1, 2).',
    'value_from_key': 'the values are projected from the `key` input; values come from `value`: v = w_v(value).',
}

# the public tests whose failure messages name each group (what check(group) runs)
TESTS_OF_GROUP = {
    'shapes': ['test_shapes', 'test_inputs_are_not_modified'],
    'split_merge': ['test_split_heads_layout', 'test_merge_heads_inverts_split'],
    'parity': ['test_bias_false_has_no_bias', 'test_matches_pytorch_with_padding_mask', 'test_matches_pytorch_with_a_causal_mask', 'test_cross_attention_weights_and_gradients_match_pytorch', 'test_inputs_are_not_modified'],
    'head_weights': ['test_shapes', 'test_cross_attention_weights_and_gradients_match_pytorch', 'test_training_output_is_computed_with_the_stored_weights'],
    'dropout': ['test_dropout_only_in_training', 'test_dropout_rate', 'test_training_output_is_computed_with_the_stored_weights'],
    'gradients': ['test_cross_attention_weights_and_gradients_match_pytorch'],
    'vectorization': ['test_split_and_merge_have_no_loop_over_heads', 'test_no_loops_and_no_forbidden_functions'],
    'from_scratch': ['test_no_loops_and_no_forbidden_functions'],
    'init_errors': ['test_rejects_indivisible_width_naming_both_numbers', 'test_accepts_divisible_widths'],
}

FORBIDDEN = [
    ('all', ['scaled_dot_product_attention', 'aten::_scaled_dot_product*', 'aten::scaled_dot_product*'], "PyTorch's own attention (torch.nn.functional.scaled_dot_product_attention): call the scaled_dot_product_attention of attention.py instead, or compute attention yourself"),
    ('all', ['multi_head_attention_forward', 'nn.MultiheadAttention', 'aten::_native_multi_head_attention*'], "PyTorch's own multi-head attention (torch.nn.MultiheadAttention, F.multi_head_attention_forward)"),
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
