"""Helpers of the public tests of milestone 1: the words they share with the hidden grader.

Generated from the course's sources (your edits here would be overwritten by the next release).
GROUPS names the hidden check group a failing test stands for; CAUSES holds the grader's own
sentence for each likely mistake the public tests recognise: the same words your report shows.
"""
from torch.overrides import TorchFunctionMode

MEASURED_SECONDS = 2.0   # cold `pytest -q` here, reference files, 2 cores, nothing else running

GROUPS = {
    'softmax': (2, 'softmax values along any dim; a row that is all -inf gives zeros'),
    'mask_helpers': (2, 'padding_mask and causal_mask: values, shapes, bool dtype, the device argument'),
    'shapes': (1, 'attention with any number of leading dims, Lq != Lk, d_k != d_v'),
    'masking': (3, 'padding, causal, combined, per-head masks; masked weights exactly 0; fully masked rows give zeros'),
    'parity': (3, 'same output and weights as torch.nn.functional.scaled_dot_product_attention, float64 and float32'),
    'stability': (2, 'no inf or NaN for logits around 1e4 (softmax and attention)'),
    'gradients': (2, "gradients reach q, k and v and match PyTorch's"),
    'vectorization': (2, 'no Python loops in softmax or attention'),
    'from_scratch': (1, 'none of the forbidden functions below'),
    'dtype_inplace': (1, 'float32 stays float32; inputs are not modified'),
    'dropout': (1, 'dropout_p drops weights at that rate, rescales the kept ones by 1/(1 - p), and the output uses the dropped weights'),
}

CAUSES = {
}

FORBIDDEN = [
    ('all', ['scaled_dot_product_attention', 'aten::_scaled_dot_product*', 'aten::scaled_dot_product*'], "PyTorch's own attention (torch.nn.functional.scaled_dot_product_attention)"),
    ('softmax', ['softmax', 'log_softmax', 'softmin', 'aten::*softmax*', 'aten::softmin'], 'torch.softmax, F.softmax, log_softmax or softmin'),
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
