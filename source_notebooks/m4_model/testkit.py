"""Helpers of the public tests of milestone 4: the words they share with the hidden grader.

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
    'positional_table': (3, 'sinusoidal_positional_encoding against the float64 formula (sin on even columns, cos on odd, positions from 0), up to position 5000; default dtype; ValueError for an odd d_model'),
    'positional_module': (2, 'PositionalEncoding: `pe` is a buffer (not a parameter) that follows .double(); adds pe[:L]; dropout in training only; ValueError naming L and max_len'),
    'embedding': (1, 'TokenEmbedding: nn.Embedding named `embedding`, scaled by sqrt(d_model)'),
    'stacks': (3, "Encoder and Decoder vs PyTorch's layers, each layer with its own weights and run in order, built with the stack's dropout, activation and norm_first; a final LayerNorm in pre-LN only; layers in an nn.ModuleList"),
    'model': (3, "Transformer logits, encode and decode vs a composition of PyTorch's modules: post-LN and pre-LN, padding and causal masks (decode uses tgt_mask as given), float32; dropout, activation and max_len reach pos_encoding and both stacks"),
    'gradients': (2, "gradients of every parameter of the model match PyTorch's"),
    'size_tying': (2, "the paper's size: Transformer(37000, 37000, tie_embeddings=True) has 63,119,496 parameters; tying shares one Parameter (three tables untied); ValueError for different vocabularies"),
    'init': (1, 'every parameter with more than one dimension Xavier-uniform; biases and norms at their defaults'),
    'behaviour': (1, 'causal decoding, padded source tokens change nothing, batch items independent, eval mode deterministic'),
    'vectorization': (1, 'no Python loops over batch or positions, in forward and in the positional table (a loop over layers is expected)'),
    'from_scratch': (1, 'none of the forbidden modules below'),
}

CAUSES = {
    'final_norm_in_post_ln': "post-LN layers already end with a norm: the stack's final LayerNorm belongs to pre-LN only (norm = LayerNorm(d_model) if norm_first else None).",
    'final_norm_missing': 'pre-LN needs a final LayerNorm after the last layer (norm = LayerNorm(d_model) when norm_first), applied in forward.',
}

# the public tests whose failure messages name each group (what check(group) runs)
TESTS_OF_GROUP = {
    'positional_table': ['test_sinusoidal_table_values', 'test_sinusoidal_table_rejects_odd_width', 'test_sinusoidal_table_accepts_every_even_width'],
    'positional_module': ['test_positional_encoding_module', 'test_positional_dropout_in_training_mode_only'],
    'embedding': ['test_token_embedding_scaled'],
    'stacks': ['test_stacks_hold_separate_layers_and_final_norm', 'test_stacks_match_pytorch', 'test_stacks_leave_their_inputs_unchanged', 'test_model_passes_every_setting_on'],
    'model': ['test_forward_shapes_and_api', 'test_matches_pytorch_transformer', 'test_model_passes_every_setting_on'],
    'gradients': ['test_gradients_reach_every_parameter'],
    'size_tying': ['test_tied_embeddings_share_one_parameter', 'test_parameter_count'],
    'init': ['test_xavier_initialisation'],
    'behaviour': ['test_model_passes_every_setting_on', 'test_model_leaves_its_inputs_unchanged'],
    'vectorization': ['test_no_loops', 'test_table_has_no_loop_over_positions'],
    'from_scratch': ['test_no_pytorch_transformer_modules'],
}

FORBIDDEN = [
    ('all', ['nn.Transformer*', 'aten::_transformer_encoder_layer_fwd*'], "PyTorch's own Transformer (torch.nn.Transformer, nn.TransformerEncoder/Decoder and their layers): use the layers of blocks.py"),
    ('all', ['layer_norm', 'nn.LayerNorm', 'aten::native_layer_norm*', 'aten::layer_norm*'], "PyTorch's own layer normalisation (torch.nn.LayerNorm, F.layer_norm): use the LayerNorm of blocks.py"),
    ('all', ['scaled_dot_product_attention', 'multi_head_attention_forward', 'nn.MultiheadAttention', 'aten::_scaled_dot_product*', 'aten::scaled_dot_product*', 'aten::_native_multi_head_attention*'], "PyTorch's own attention (torch.nn.MultiheadAttention, F.scaled_dot_product_attention)"),
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
