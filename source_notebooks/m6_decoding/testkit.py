"""Helpers of the public tests of milestone 6: the words they share with the hidden grader.

Generated from the course's sources (your edits here would be overwritten by the next release).
GROUPS names the hidden check group a failing test stands for; CAUSES holds the grader's own
sentence for each likely mistake the public tests recognise: the same words your report shows.
"""
from torch.overrides import TorchFunctionMode

MEASURED_SECONDS = 4.0   # cold `pytest -q` here, reference files, 2 cores, nothing else running

GROUPS = {
    'greedy': (4, "greedy_decode's tokens against the judge's own decoding, on scripted models and on small random post-LN and pre-LN Transformers left in train mode: <bos> first, argmax, <pad> after <eos>, the causal mask, stopping once every sequence has ended"),
    'sampling': (4, "sample_decode: the filtered distribution measured over thousands of draws (temperature, top-k, top-p on what top-k kept, the token that crosses top_p kept); ValueError unless temperature > 0; with a seeded generator, exactly the judge's tokens (one torch.multinomial(probs, 1, generator=generator) per step on all B rows)"),
    'beam': (5, "beam_search's tokens and scores against the judge's own search: one start hypothesis, finished hypotheses kept at no cost, the GNMT length penalty for the final choice only; beam_size=1 gives greedy's tokens; a beam wider than every hypothesis gives the exhaustive search's winner; batch items independent"),
    'kv_cache': (4, "greedy_decode_cached gives greedy's tokens and the same logits at model.generator on post-LN and pre-LN models; the matrix-multiply FLOPs of each step stay those of the newest position (no growth with the prefix, no projection of memory after the first step)"),
    'modes': (1, 'every function that gives the right tokens switches the model to eval mode, runs without gradients and puts back the mode it found'),
    'batched': (2, 'no Python loop over the batch items: the tensor operations counted for B = 2 and B = 5 are the same (a loop over time steps is expected)'),
}

CAUSES = {
}

FORBIDDEN = [
]


def group(name):
    """The words for a hidden check group: "hidden check group `dropout` (2 points)"."""
    return f"hidden check group `{name}` ({GROUPS[name][0]} points: {GROUPS[name][1]})"


def cause(mistake_id):
    """The grader's likely-cause sentence for one known mistake."""
    return "Likely cause: " + CAUSES[mistake_id]


class TorchCalls(TorchFunctionMode):
    """Counts the torch functions called inside `with TorchCalls() as calls:`; calls.names lists them."""

    def __enter__(self):
        self.names = []
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, '__name__', str(func)))
        return func(*args, **(kwargs or {}))

    @property
    def count(self):
        return len(self.names)
