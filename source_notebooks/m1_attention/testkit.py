"""Helpers of the public tests of milestone 1: the words they share with the hidden grader.

Generated from the course's sources (your edits here would be overwritten by the next release).
GROUPS names the hidden check group a failing test stands for; CAUSES holds the grader's own
sentence for each likely mistake the public tests recognise: the same words your report shows.
"""
import contextlib
import functools
import inspect

import torch
from torch.overrides import TorchFunctionMode

MEASURED_SECONDS = 1.2   # cold `pytest -q` here, reference files, 2 cores (median of 3)

GROUPS = {
    'softmax': (2, 'softmax values along any dim; a row that is all -inf gives zeros'),
    'mask_helpers': (2, 'padding_mask and causal_mask: values, shapes, bool dtype, the device argument'),
    'shapes': (1, 'attention with any number of leading dims, Lq != Lk, d_k != d_v'),
    'masking': (3, 'padding, causal, combined, per-head masks; masked weights exactly 0, also when blocked keys have the largest scores; fully masked rows give zeros'),
    'parity': (3, 'same output and weights as torch.nn.functional.scaled_dot_product_attention, float64 and float32'),
    'stability': (2, 'no inf or NaN for logits around 1e4 (softmax and attention)'),
    'gradients': (2, "gradients reach q, k and v and match PyTorch's, also (finite) when a query row is fully masked"),
    'vectorization': (2, 'no Python loops in softmax or attention'),
    'from_scratch': (1, 'none of the forbidden functions below'),
    'dtype_inplace': (1, 'float32 stays float32; inputs are not modified'),
    'dropout': (1, 'dropout_p drops each weight independently at that rate, rescales the kept ones by 1/(1 - p), and the output uses the dropped weights'),
}

CAUSES = {
    'divide_by_dk': 'the scores are divided by d_k instead of sqrt(d_k).',
    'dropout_mask_shared': "the dropout mask is drawn once with shape [Lq, Lk] and broadcast, so every batch item and every head drops the same weights: drop each weight independently, with a mask of the weights' full shape (torch.rand_like(weights) >= dropout_p), or call torch.nn.functional.dropout(weights, p=dropout_p).",
    'dropout_no_rescale': 'the weights that survive dropout must be divided by (1 - dropout_p), so the expected output is unchanged (F.dropout does this).',
    'dropout_renormalised': 'dropout acts before the softmax (dropped keys get -inf, as in DropKey), so the softmax hands their weight to the kept keys and each row still sums to 1: apply dropout to the weights after the softmax, zeroing the dropped ones and dividing the kept ones by (1 - dropout_p) (torch.nn.functional.dropout(weights, p=dropout_p)).',
    'dropout_rescale_by_p': 'the weights that survive dropout must be divided by (1 - dropout_p), the probability of keeping them, not by dropout_p.',
    'fill_large_negative': 'masked scores are filled with a large negative number instead of -inf, so a query row whose keys are all masked averages v instead of giving zeros; fill with -inf and let your softmax return zeros for an all -inf row.',
    'mask_after_softmax_renormalised': "the mask is applied after a softmax over all the keys, and the rows are renormalised (softmax(scores) * mask, divided by the row sums): where a blocked key's score is far above the allowed ones, the allowed keys' weights underflow to 0 in that softmax, so the row comes out all zeros instead of a softmax over the allowed keys. Set the blocked scores to -inf before the softmax (scores.masked_fill(~mask, float('-inf'))).",
    'mask_unsqueezed': 'a 3-D mask gets an extra dimension inside attention; masks only have to broadcast to the scores, so leave the mask as it is given (a per-head mask [H, Lq, Lk] then no longer lines up).',
    'no_sqrt': 'the scores are not divided by sqrt(d_k): divide q @ k^T by math.sqrt(d_k).',
    'padding_mask_blocks_zero': 'the mask blocks the id 0 as well as pad_id ((tokens != pad_id) & (tokens != 0)): only pad_id is padding, and when pad_id is another id, 0 is a real token. Use tokens != pad_id alone.',
    'softmax_global_max': "one max of the whole tensor is subtracted; subtract each slice's own max along `dim` (x.amax(dim=dim, keepdim=True)), or slices far below the global max underflow to 0.",
    'softmax_global_sum': 'each entry is divided by the sum over the whole tensor; divide by the sum along `dim` only (keepdim=True).',
    'softmax_ignores_dim': 'the softmax is taken over the last dimension whatever `dim` says: reduce over `dim` (amax and sum with dim=dim, keepdim=True).',
    'softmax_overflow': "exp of a large score overflows to inf (exp(710) in float64, exp(89) in float32), and inf / inf is NaN: subtract each slice's max before exp (softmax(x) == softmax(x - max)).",
    'sqrt_dv': "the scores are divided by sqrt(d_v) (the last dimension of v); the scale comes from the keys' width: sqrt(d_k) = sqrt(q.size(-1)).",
    'swapped_return': 'it returns (weights, output); return them in the order (output, weights).',
}

# the public tests whose failure messages name each group (what check(group) runs)
TESTS_OF_GROUP = {
    'softmax': ['test_softmax_matches_torch', 'test_softmax_of_rows_with_minus_inf'],
    'mask_helpers': ['test_padding_mask', 'test_causal_mask', 'test_causal_mask_on_the_device_asked'],
    'shapes': ['test_attention_shapes'],
    'masking': ['test_masks_match_pytorch', 'test_fully_masked_rows_give_zeros', 'test_blocked_keys_with_the_largest_scores'],
    'parity': ['test_attention_matches_pytorch', 'test_float32_inputs_stay_float32'],
    'stability': ['test_softmax_is_stable_for_large_logits', 'test_softmax_of_rows_far_apart', 'test_stable_for_large_scores'],
    'gradients': ['test_gradients_match_pytorch', 'test_gradients_finite_for_a_fully_masked_row'],
    'vectorization': ['test_softmax_has_no_loop_and_no_forbidden_functions', 'test_attention_has_no_loop_and_no_forbidden_functions'],
    'from_scratch': ['test_softmax_has_no_loop_and_no_forbidden_functions', 'test_attention_has_no_loop_and_no_forbidden_functions'],
    'dtype_inplace': ['test_softmax_keeps_dtype_and_input', 'test_float32_inputs_stay_float32', 'test_inputs_are_not_modified', 'test_padding_mask_leaves_tokens_unchanged'],
    'dropout': ['test_dropout_drops_and_rescales', 'test_dropout_draws_each_weight', 'test_no_dropout_when_p_is_zero'],
}

FORBIDDEN = [
    ('all', ['scaled_dot_product_attention', 'aten::_scaled_dot_product*', 'aten::scaled_dot_product*'], "PyTorch's own attention (torch.nn.functional.scaled_dot_product_attention)"),
    ('softmax', ['softmax', 'log_softmax', 'softmin', 'aten::*softmax*', 'aten::softmin'], 'torch.softmax, F.softmax, log_softmax or softmin'),
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
