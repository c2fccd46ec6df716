"""Helpers of the public tests of milestone 6: the words they share with the hidden grader.

Generated from the course's sources (your edits here would be overwritten by the next release).
GROUPS names the hidden check group a failing test stands for; CAUSES holds the grader's own
sentence for each likely mistake the public tests recognise: the same words your report shows.
"""
import contextlib
import functools
import inspect

import torch
from torch.overrides import TorchFunctionMode

MEASURED_SECONDS = 1.5   # cold `pytest -q` here, reference files, 2 cores (median of 3)

GROUPS = {
    'greedy': (4, "greedy_decode's tokens against the judge's own decoding, on scripted models and on small random post-LN and pre-LN Transformers left in train mode: <bos> first, argmax, pad_id after <eos> (also one other than 0), the causal mask, stopping once every sequence has ended, float32 and float64 models"),
    'sampling': (4, "sample_decode: the filtered distribution measured over thousands of draws (temperature, top-k, a top_k above the vocabulary keeping every token, top-p on what top-k kept, the token that crosses top_p kept); ValueError unless temperature > 0; with a seeded generator, exactly the judge's tokens (one torch.multinomial(probs, 1, generator=generator) per step on all B rows)"),
    'beam': (5, "beam_search's tokens and scores against the judge's own search: one start hypothesis, finished hypotheses kept at no cost, the GNMT length penalty for the final choice only; beam_size=1 gives greedy's tokens; a beam wider than every hypothesis gives the exhaustive search's winner, unfinished hypotheses included; batch items independent; pad_id other than 0; scores in the model's dtype (float32 too)"),
    'kv_cache': (4, "greedy_decode_cached gives greedy's tokens and the same logits at model.generator on post-LN and pre-LN models, float32 and float64, pad_id other than 0; the matrix-multiply FLOPs of each step stay those of the newest position (no growth with the prefix, no projection of memory after the first step)"),
    'modes': (1, 'every function that gives the right tokens (or tokens a known mistake explains) switches the model to eval mode, runs without gradients and puts back the mode it found'),
    'batched': (2, 'no Python loop over the batch items: the tensor operations counted for a batch of 2 and a batch of 9 to 16 are the same, also with top_k and top_p set (a loop over time steps is expected)'),
}

CAUSES = {
    'beam_items_mixed': "memory and src_mask are repeated with .repeat (the whole batch after the whole batch), so hypothesis row b * beam_size + j decodes another item's source; .repeat_interleave(beam_size, dim=0) (each item beam_size times in a row) matches the [B * beam_size] order of the hypotheses.",
    'cached_position_off_by_one': 'the new token gets the positional encoding of the next position; the token at position t (the <bos> is at 0) gets pe[t].',
    'cached_position_zero': 'every new token gets the positional encoding of position 0; the token at position t gets model.pos_encoding.pe[t].',
    'duplicate_start_beams': 'the search starts with beam_size copies of [<bos>], all at score 0, so the beam fills with duplicates; start from one hypothesis: slot 0 at score 0, the others at -inf.',
    'finished_beams_extended': 'finished hypotheses keep being extended with real tokens; after <eos> a hypothesis may only be extended by pad_id, at no cost (its score stays).',
    'finished_beams_pay_for_pad': 'a finished hypothesis pays log p(<pad>) for its pad; it is extended by pad_id at no cost (score unchanged).',
    'length_counts_bos': 'the length n counts <bos>; n is the number of tokens AFTER <bos> up to and including the first <eos>.',
    'length_counts_pads': 'the length n counts the pads after <eos>; n stops at the first <eos> (max_len only for a hypothesis that never finished).',
    'length_penalty_forgotten': 'the final choice uses the raw summed log-probability; it uses the normalised score sum_logprob / ((5 + n) / 6) ** length_penalty (use length_penalty_score), which is also what `scores` returns.',
    'length_without_eos': 'the length n leaves out <eos>; n counts the tokens after <bos> up to and including the first <eos>.',
    'no_pad_after_eos': "after a sequence's <eos> the loop keeps appending the model's choices; every later position must be pad_id (keep a `finished` flag per row and write pad_id where it is set).",
    'normalised_every_step': 'the hypotheses are ranked by the normalised score at every step; keep the beam_size best by summed log-probability, and normalise only to choose the final result.',
    'scores_not_normalised': 'the result is chosen by the normalised score, but `scores` returns the raw summed log-probability of the winner; return its normalised score (length_penalty_score).',
    'stops_when_best_finished': 'the search stops as soon as the best hypothesis has finished; it goes on until every hypothesis has (or max_len steps).',
    'temperature_after_filter': 'the temperature is applied after top-k/top-p filtering, so top-p measures the untempered distribution; divide the logits by the temperature first, then filter.',
    'top_k_minus_one': 'top-k keeps k - 1 tokens: keep exactly the k largest logits (torch.topk(logits, k)).',
    'top_k_not_clamped': 'top_k is not clamped to the vocabulary size: with top_k >= V every token is kept (the docstring), so use k = min(top_k, logits.size(-1)) (torch.topk and indexing fail beyond V).',
    'top_k_plus_one': 'top-k keeps k + 1 tokens: keep exactly the k largest logits (torch.topk(logits, k)).',
    'top_p_before_top_k_renormalised': 'top-p is computed on the distribution before top-k; compute it on the softmax of what top-k kept (renormalised).',
    'top_p_drops_crossing_token': 'top-p drops the token whose probability makes the total cross top_p; it must be kept: keep a token when the total of the tokens BEFORE it (in descending order) is < top_p.',
    'top_p_not_scattered_back': "the top-p mask is applied in sorted order to the vocabulary: map it back to vocabulary order with the sort's indices (mask.scatter(-1, sorted_indices, keep_sorted)).",
    'top_p_on_raw_probabilities': "top-p is measured on the model's raw probabilities (the softmax of the logits before the temperature and top-k); measure it on the softmax of the tempered logits that top-k kept.",
    'winner_among_finished_only': 'the result is chosen among the finished hypotheses only; a hypothesis still unfinished after max_len steps competes too (its n is max_len) and can win.',
}

# the public tests whose failure messages name each group (what check(group) runs)
TESTS_OF_GROUP = {
    'greedy': ['test_greedy_is_the_argmax_after_every_prefix', 'test_greedy_copies_with_the_copying_oracle', 'test_greedy_stops_at_max_len', 'test_one_generator_call_per_step_and_no_extra_steps'],
    'sampling': ['test_sampling_rejects_bad_temperature', 'test_sampling_is_reproducible_and_degenerates_to_greedy', 'test_sampling_with_the_copying_oracle', 'test_sampling_filters_on_a_known_distribution', 'test_sampling_draw_is_one_multinomial_with_the_generator', 'test_top_k_keeps_only_the_k_best_first_tokens', 'test_one_generator_call_per_step_and_no_extra_steps', 'test_sampling_draws_every_row_with_one_multinomial_per_step'],
    'beam': ['test_beam_size_one_is_greedy', 'test_wide_beam_finds_the_exhaustive_best', 'test_beam_on_hand_written_trees', 'test_beam_with_the_copying_oracle', 'test_beam_item_alone_or_in_a_batch', 'test_beam_scores_in_the_dtype_of_a_float32_model', 'test_one_generator_call_per_step_and_no_extra_steps'],
    'kv_cache': ['test_cached_greedy_gives_greedy_tokens', 'test_cached_greedy_runs_to_max_len', 'test_cached_step_work_does_not_grow_and_memory_is_projected_once', 'test_one_generator_call_per_step_and_no_extra_steps'],
    'modes': ['test_greedy_is_the_argmax_after_every_prefix', 'test_greedy_copies_with_the_copying_oracle', 'test_greedy_stops_at_max_len', 'test_cached_greedy_gives_greedy_tokens', 'test_cached_greedy_runs_to_max_len', 'test_sampling_is_reproducible_and_degenerates_to_greedy', 'test_top_k_keeps_only_the_k_best_first_tokens', 'test_beam_size_one_is_greedy', 'test_wide_beam_finds_the_exhaustive_best', 'test_beam_on_hand_written_trees', 'test_one_generator_call_per_step_and_no_extra_steps'],
    'batched': ['test_greedy_copies_with_the_copying_oracle', 'test_no_loop_over_the_batch'],
}

FORBIDDEN = [
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
