"""Helpers of the public tests of milestone 5: the words they share with the hidden grader.

Generated from the course's sources (your edits here would be overwritten by the next release).
GROUPS names the hidden check group a failing test stands for; CAUSES holds the grader's own
sentence for each likely mistake the public tests recognise: the same words your report shows.
"""
import contextlib
import functools
import inspect

import torch
from torch.overrides import TorchFunctionMode

MEASURED_SECONDS = 2.3   # cold `pytest -q` here, reference files, 2 cores (median of 3)

GROUPS = {
    'tokenizer': (2, 'ids 0-3 are <pad> <bos> <eos> <unk>, then the sorted characters; encode with <unk> for unknown characters; decode stops at <eos>, skips <pad> and <bos>, writes <unk>'),
    'batches': (2, 'make_batch: right padding with the pad_id given (also one other than 0), tgt_in = <bos> + target and tgt_out = target + <eos> (the shift), bool masks [B, 1, Ls] and [B, Lt, Lt] as the docstring defines them'),
    'loss': (4, 'label_smoothed_cross_entropy equals F.cross_entropy (value and gradient) with and without smoothing and padding (pad_id None, 0, another id, and ids that are not classes: -100, V; NaN when every target is pad_id), float64 and float32, logits around 1e4 and far apart'),
    'schedule': (2, 'noam_lr at step 0, 1, the warm-up peak and far past it; make_optimizer: Adam(lr 1.0, betas (0.9, 0.98), eps 1e-9) and a LambdaLR giving noam_lr(s) after s steps'),
    'train_step': (4, "one and three steps give exactly the parameters of the judge's own steps (Adam in float64; SGD in float32 with a pad_id other than 0); gradients zeroed first; clipping as clip_grad_norm_; train mode; scheduler stepped after the optimizer; the loss stepped on returned as a Python float"),
    'evaluate': (2, "plain cross-entropy per non-pad token over all batches, in eval mode without gradients, the model's mode put back"),
    'learning': (2, 'your train_step, make_optimizer and loss make a small Transformer overfit a tiny batch'),
    'from_scratch': (2, 'none of the forbidden functions below in the loss; no Python loop over positions in the loss'),
}

CAUSES = {
    'no_zero_grad': 'the gradients are never zeroed, so they pile up across steps: call optimizer.zero_grad() at the start of train_step.',
    'noam_step_zero': 'step 0 must count as step 1: step = max(step, 1).',
    'scheduler_before_optimizer': "scheduler.step() runs before optimizer.step(), so every step uses the next step's learning rate: step the optimizer first.",
    'zero_grad_after_backward': 'the gradients are zeroed after backward(), so the optimizer steps on zeros: zero them before the forward pass.',
}

# the public tests whose failure messages name each group (what check(group) runs)
TESTS_OF_GROUP = {
    'tokenizer': ['test_tokenizer_vocabulary', 'test_tokenizer_decode'],
    'batches': ['test_make_batch_docstring_example', 'test_make_batch_other_special_ids_and_inputs_untouched'],
    'loss': ['test_loss_value_and_gradient_match_cross_entropy', 'test_loss_any_leading_shape_and_float32', 'test_loss_is_stable_and_nan_when_all_pad', 'test_loss_pad_id_that_is_not_a_class'],
    'schedule': ['test_noam_lr', 'test_make_optimizer'],
    'train_step': ['test_train_step_steps_on_the_right_gradients', 'test_train_step_defaults'],
    'evaluate': ['test_evaluate_weighs_tokens_and_restores_mode'],
    'learning': ['test_tiny_model_overfits_one_batch'],
    'from_scratch': ['test_loss_from_scratch_and_no_loop'],
}

FORBIDDEN = [
    ('label_smoothed_cross_entropy', ['cross_entropy', 'nll_loss', 'log_softmax', 'softmax', 'kl_div', 'binary_cross_entropy*', 'aten::*log_softmax*', 'aten::_softmax*', 'aten::softmax*', 'aten::nll_loss*', 'aten::cross_entropy*', 'aten::kl_div*'], "PyTorch's cross-entropy, NLL, softmax, log-softmax or KL functions (torch.*, F.* or tensor methods) inside label_smoothed_cross_entropy; torch.logsumexp and F.one_hot are allowed"),
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
