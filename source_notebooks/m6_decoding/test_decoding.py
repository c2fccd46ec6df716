"""Public tests for milestone 6. Run `pytest -q` in this folder (about 7.8 s cold on 2 cores
measured with the reference files; several times that while other jobs share the machine). The models here
are small and built deterministically (no training): what matters is that their outputs vary with the
source.

A quick subset of the grader's checks: greedy decoding against a plain loop, the output format, the
steps seen at model.generator (no extra step once every sequence has ended), the KV cache giving
greedy's tokens with work per step that does not grow with the prefix and memory projected once,
sampling filters, seeding and one torch.multinomial call per step over every row, and beam search
against an exhaustive search on a tiny vocabulary. A failing test names the hidden check group that
would lose points (testkit.py). The hidden checks go further (logits per step, batch invariance, ...).
"""
import math

import pytest
import torch
import torch.nn.functional as F

from attention import causal_mask
from decoding import beam_search, greedy_decode, greedy_decode_cached, sample_decode
from model import Transformer
from testkit import group

PAD, BOS, EOS, V = 0, 1, 2, 10

torch.set_num_threads(1)   # tiny tensors: one thread is fastest, and stays fast while other jobs share the cores


def _source_model(norm_first):
    """A small 2-layer Transformer built deterministically (no training): generator weights scaled up so
    that its predictions depend clearly on the source, and eos made likely enough that every sequence of
    SRC ends within 10 steps. Left in train mode on purpose (dropout 0.1): decoding must switch to eval."""
    torch.manual_seed(11)
    model = Transformer(V, V, d_model=32, num_heads=2, num_layers=2, d_ff=64, dropout=0.1, max_len=32,
                        norm_first=norm_first)
    with torch.no_grad():
        model.generator.weight.mul_(3.0)
        model.generator.bias[EOS] = 1.5
        model.generator.bias[BOS] = -1e4
        model.generator.bias[PAD] = -1e4
    return model.train()


@pytest.fixture(scope="module")
def copy_model():
    return _source_model(norm_first=False)


@pytest.fixture(scope="module")
def copy_model_pre_ln():
    return _source_model(norm_first=True)


@pytest.fixture(params=["post-LN", "pre-LN"])
def any_copy_model(request):
    return request.getfixturevalue("copy_model" if request.param == "post-LN" else "copy_model_pre_ln")


def _random_model(norm_first=False, layers=2, seed=0):
    torch.manual_seed(seed)
    model = Transformer(V, V, d_model=16, num_heads=2, num_layers=layers, d_ff=32, dropout=0.1, max_len=32,
                        norm_first=norm_first).double()
    with torch.no_grad():
        model.generator.weight.mul_(4.0)                   # sharper, more varied predictions
    return model


SRC = torch.tensor([[3, 4, 5, 0, 0, 0], [9, 8, 7, 6, 5, 4], [5, 0, 0, 0, 0, 0], [6, 6, 3, 8, 0, 0]])
SRC_MASK = (SRC != PAD)[:, None, :]


def _plain_greedy(model, src, src_mask, max_len):
    """A straightforward greedy loop: the tokens greedy_decode should give. Keeps the model's mode."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        ys = torch.full((src.size(0), 1), BOS, dtype=torch.long)
        done = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            out = model.decode(ys, memory, src_mask, causal_mask(ys.size(1)))
            nxt = model.generator(out[:, -1]).argmax(-1).masked_fill(done, PAD)
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            done |= nxt == EOS
            if done.all():
                break
    model.train(was_training)
    return ys


def _check_format(tokens, B, max_len, name):
    assert tokens.dtype == torch.int64, f"{name} should return int64 tokens, got {tokens.dtype}"
    assert tokens.dim() == 2 and tokens.size(0) == B and 2 <= tokens.size(1) <= max_len + 1, (
        f"{name} should return [B, T] with B={B} and T <= max_len + 1 = {max_len + 1}, got {tuple(tokens.shape)}")
    assert (tokens[:, 0] == BOS).all(), f"{name}: every row should start with bos_id={BOS}"
    for row in tokens.tolist():
        if EOS in row:
            after = row[row.index(EOS) + 1:]
            assert all(t == PAD for t in after), f"{name}: after eos every position should be pad_id, got row {row}"


def _strip(tokens):
    """Drop trailing all-pad columns (they carry no meaning)."""
    while tokens.size(1) > 1 and (tokens[:, -1] == PAD).all():
        tokens = tokens[:, :-1]
    return tokens


# ---------------------------------------------------------------------------------------- greedy

def test_greedy_matches_plain_loop_and_restores_mode(any_copy_model):
    model = any_copy_model
    got = greedy_decode(model, SRC, SRC_MASK, 10, BOS, EOS, PAD)
    assert model.training, "greedy_decode should put the model back in the mode it found (train here)"
    _check_format(got, 4, 10, "greedy_decode")
    want = _plain_greedy(model, SRC, SRC_MASK, 10)
    assert torch.equal(_strip(got), _strip(want)), (
        f"greedy_decode should give {want.tolist()}, got {got.tolist()} (eval mode; decode the whole prefix "
        "with the causal mask; pad after eos)")
    if all(EOS in row for row in want.tolist()):
        assert got.size(1) < 11, (
            f"every sequence ended with eos, so the loop should stop early (T < max_len + 1) [{group('greedy')}]")


def test_greedy_stops_at_max_len():
    model = _random_model()
    with torch.no_grad():
        model.generator.bias[EOS] = -1e9                    # eos is never chosen
    got = greedy_decode(model, SRC, SRC_MASK, 5, BOS, EOS, PAD)
    assert got.shape == (4, 6), f"with no eos and max_len=5 the result should be [B, max_len + 1] = (4, 6), got {tuple(got.shape)}"


def test_cached_greedy_gives_greedy_tokens(any_copy_model):
    model = any_copy_model
    want = _plain_greedy(model, SRC, SRC_MASK, 10)
    got = greedy_decode_cached(model, SRC, SRC_MASK, 10, BOS, EOS, PAD)
    assert model.training, "greedy_decode_cached should put the model back in the mode it found (train here)"
    _check_format(got, 4, 10, "greedy_decode_cached")
    kind = "pre-LN" if model.decoder.norm is not None else "post-LN"
    assert torch.equal(_strip(got), _strip(want)), (
        f"greedy_decode_cached ({kind}) should give greedy's tokens {want.tolist()}, got {got.tolist()}")


def test_cached_greedy_runs_to_max_len():
    model = _random_model(norm_first=True)
    with torch.no_grad():
        model.generator.bias[EOS] = -1e9                    # eos is never chosen
    want = greedy_decode(model, SRC, SRC_MASK, 9, BOS, EOS, PAD)
    got = greedy_decode_cached(model, SRC, SRC_MASK, 9, BOS, EOS, PAD)
    assert got.shape == (4, 10), f"with no eos and max_len=9 the result should be [B, max_len + 1] = (4, 10), got {tuple(got.shape)}"
    assert torch.equal(got, want), f"greedy_decode_cached should give greedy_decode's tokens {want.tolist()}, got {got.tolist()}"


# -------------------------------------------------------------------------------------- sampling

def test_sampling_rejects_bad_temperature(copy_model):
    with pytest.raises(ValueError):
        sample_decode(copy_model, SRC, SRC_MASK, 10, BOS, EOS, PAD, temperature=0.0)


def test_sampling_is_reproducible_and_filters(copy_model):
    runs = [sample_decode(copy_model, SRC, SRC_MASK, 10, BOS, EOS, PAD, temperature=1.5,
                          generator=torch.Generator().manual_seed(s)) for s in (7, 7)]
    _check_format(runs[0], 4, 10, "sample_decode")
    assert torch.equal(runs[0], runs[1]), "two runs with generators seeded alike should give the same tokens"
    greedy = _plain_greedy(copy_model, SRC, SRC_MASK, 10)
    top1 = sample_decode(copy_model, SRC, SRC_MASK, 10, BOS, EOS, PAD, temperature=2.0, top_k=1)
    assert torch.equal(_strip(top1), _strip(greedy)), "with top_k=1 sampling should give greedy's tokens"
    cold = sample_decode(copy_model, SRC, SRC_MASK, 10, BOS, EOS, PAD, temperature=1e-3,
                         generator=torch.Generator().manual_seed(0))
    assert torch.equal(_strip(cold), _strip(greedy)), (
        "at temperature 1e-3 (logits divided by it: a near one-hot distribution) sampling should give greedy's tokens")
    tiny_p = sample_decode(copy_model, SRC, SRC_MASK, 10, BOS, EOS, PAD, temperature=2.0, top_p=1e-6)
    assert torch.equal(_strip(tiny_p), _strip(greedy)), "with a tiny top_p only the most probable token is kept: greedy's tokens"
    assert copy_model.training, "sample_decode should put the model back in the mode it found"


def test_top_k_keeps_only_the_k_best_first_tokens():
    model = _random_model().eval()
    src, src_mask = SRC.repeat(50, 1), SRC_MASK.repeat(50, 1, 1)                 # 200 rows
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        first_logits = model.generator(model.decode(torch.full((200, 1), BOS), memory, src_mask)[:, -1])
    allowed = first_logits.topk(3, dim=-1).indices                              # [200, 3]
    got = sample_decode(model, src, src_mask, 1, BOS, EOS, PAD, temperature=5.0, top_k=3,
                        generator=torch.Generator().manual_seed(0))
    assert got.shape == (200, 2), f"max_len=1 should give [B, 2], got {tuple(got.shape)}"
    assert (got[:, 1:2] == allowed).any(dim=1).all(), "with top_k=3 every first token must be one of the 3 largest logits"


def test_top_p_keeps_the_token_that_crosses_top_p():
    model = _random_model().eval()
    src, src_mask = SRC[1:2].repeat(200, 1), SRC_MASK[1:2].repeat(200, 1, 1)     # one source, 200 rows
    with torch.no_grad():
        memory = model.encode(src[:1], src_mask[:1])
        logits = model.generator(model.decode(torch.full((1, 1), BOS), memory, src_mask[:1])[:, -1]) / 5.0
    probs, order = torch.softmax(logits[0], dim=-1).sort(descending=True)
    top_p = (probs[0] + 0.5 * probs[1]).item()               # the 2nd token crosses top_p: keep exactly 2
    got = sample_decode(model, src, src_mask, 1, BOS, EOS, PAD, temperature=5.0, top_p=top_p,
                        generator=torch.Generator().manual_seed(0))[:, 1]
    allowed = set(order[:2].tolist())
    assert set(got.tolist()) <= allowed, (
        f"with top_p={top_p:.3f} (= p1 + p2/2) only the two most probable tokens {sorted(allowed)} may be drawn, "
        f"got {sorted(set(got.tolist()))}")
    assert order[1].item() in got.tolist(), (
        "the token whose probability crosses top_p must be kept: the 2nd most probable token never appeared in 200 draws")


# ----------------------------------------------------------------------------------- beam search

def test_beam_size_one_is_greedy(copy_model):
    tokens, scores = beam_search(copy_model, SRC, SRC_MASK, 10, BOS, EOS, PAD, beam_size=1)
    greedy = _plain_greedy(copy_model, SRC, SRC_MASK, 10)
    _check_format(tokens, 4, 10, "beam_search")
    assert scores.shape == (4,), f"scores should be [B] = (4,), got {tuple(scores.shape)}"
    assert torch.equal(_strip(tokens), _strip(greedy)), f"beam_size=1 should give greedy's tokens {greedy.tolist()}, got {tokens.tolist()}"


def _exhaustive_best(model, src, src_mask, max_len, alpha):
    """Best GNMT-normalised hypothesis by enumerating every token sequence (tiny V only)."""
    best = (-math.inf, None)
    with torch.no_grad():
        memory = model.encode(src, src_mask)

        def logp(prefix):
            ys = torch.tensor([prefix])
            out = model.decode(ys, memory, src_mask, causal_mask(len(prefix)))
            return torch.log_softmax(model.generator(out[:, -1]), dim=-1)[0]

        def walk(prefix, total):
            nonlocal best
            n = len(prefix) - 1
            if (n and prefix[-1] == EOS) or n == max_len:
                score = total / ((5 + n) / 6) ** alpha
                if score > best[0]:
                    best = (score, prefix)
                return
            lp = logp(prefix)
            for tok in range(lp.numel()):
                walk(prefix + [tok], total + lp[tok].item())

        walk([BOS], 0.0)
    return best


@pytest.mark.parametrize("seed", [1, 3])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_finds_the_exhaustive_best(seed, alpha):
    # V = 6 (pad, bos, eos, 3 tokens); pad and bos made almost impossible. With these seeds greedy is
    # not optimal, and the winner changes with alpha (a short, a longer and an unfinished hypothesis).
    torch.manual_seed(seed)
    model = Transformer(6, 6, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0).double()
    with torch.no_grad():
        model.generator.weight.mul_(3.0)
        model.generator.bias.copy_(torch.tensor([-1e9, -1e9, 0.0, 0.0, 0.0, 0.0]))
    src = torch.tensor([[3, 4, 5]])
    src_mask = torch.ones(1, 1, 3, dtype=torch.bool)
    want_score, want_tokens = _exhaustive_best(model, src, src_mask, 3, alpha)
    tokens, scores = beam_search(model, src, src_mask, 3, BOS, EOS, PAD, beam_size=216, length_penalty=alpha)
    assert scores.dtype == torch.float64, f"scores should be in the model's dtype (float64 here), got {scores.dtype}"
    assert tokens.shape[0] == 1 and tokens.shape[1] >= len(want_tokens), (
        f"expected [B, T] = [1, >= {len(want_tokens)}] tokens, got {tuple(tokens.shape)}")
    got = tokens[0].tolist()
    want_row = want_tokens + [PAD] * (len(got) - len(want_tokens))
    assert math.isclose(scores[0].item(), want_score, rel_tol=1e-6, abs_tol=1e-9), (
        f"a beam wide enough to keep every hypothesis (V=6, max_len=3) must find the best normalised score "
        f"sum_logprob / ((5 + n) / 6) ** {alpha} = {want_score:.6f} ({want_tokens}), got {scores[0].item():.6f} ({got})")
    assert got == want_row, f"expected the tokens {want_row}, got {got}"


def test_beam_item_alone_or_in_a_batch(copy_model):
    tokens, scores = beam_search(copy_model, SRC, SRC_MASK, 8, BOS, EOS, PAD, beam_size=3)
    _check_format(tokens, 4, 8, "beam_search")
    for i in (1, 3):
        alone, alone_score = beam_search(copy_model, SRC[i:i + 1], SRC_MASK[i:i + 1], 8, BOS, EOS, PAD, beam_size=3)
        assert _strip(alone)[0].tolist() == _strip(tokens[i:i + 1])[0].tolist(), (
            f"item {i} should get the same tokens alone as in the batch: {_strip(alone)[0].tolist()} vs "
            f"{_strip(tokens[i:i + 1])[0].tolist()}")
        assert torch.allclose(alone_score, scores[i:i + 1]), f"item {i} should get the same score alone as in the batch"


# ------------------------------------------------------------------ what the grader observes

class _Watch(torch.overrides.TorchFunctionMode):
    """Records (name, shapes of the tensor arguments) of every torch function called inside it."""

    def __enter__(self):
        self.calls = []
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        shapes = [tuple(a.shape) for a in list(args) + list((kwargs or {}).values()) if isinstance(a, torch.Tensor)]
        self.calls.append((getattr(func, "__name__", str(func)), shapes))
        return func(*args, **(kwargs or {}))


class _CountingGenerator(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.rows = []

    def forward(self, h):
        self.rows.append(h.reshape(-1, h.size(-1)).size(0))
        return self.inner(h)


@pytest.mark.parametrize("name", ["greedy_decode", "greedy_decode_cached", "sample_decode"])
def test_one_generator_call_per_step_and_no_extra_steps(name, copy_model):
    fn = {"greedy_decode": greedy_decode, "greedy_decode_cached": greedy_decode_cached,
          "sample_decode": sample_decode}[name]
    model = copy_model
    inner = model.generator
    model.generator = _CountingGenerator(inner)
    try:
        kw = {"generator": torch.Generator().manual_seed(0)} if name == "sample_decode" else {}
        tokens = fn(model, SRC, SRC_MASK, 10, BOS, EOS, PAD, **kw)
        calls = model.generator.rows
    finally:
        model.generator = inner
    ends = [row.index(EOS) if EOS in row else len(row) - 1 for row in tokens.tolist()]
    steps = max(ends)
    assert len(calls) == steps, (
        f"{name} called model.generator {len(calls)} times for tokens whose last sequence ended at step {steps}: "
        "one call per step, and no extra step once every sequence has produced eos "
        f"[{group('greedy' if 'greedy' in name else 'sampling')}]" if name != "greedy_decode_cached" else
        f"greedy_decode_cached called model.generator {len(calls)} times for {steps} steps: one call per step "
        f"[{group('kv_cache')}]")


def test_sampling_draws_every_row_with_one_multinomial_per_step(copy_model):
    with _Watch() as watch:
        tokens = sample_decode(copy_model, SRC, SRC_MASK, 10, BOS, EOS, PAD, temperature=1.3,
                               generator=torch.Generator().manual_seed(3))
    draws = [shapes for name, shapes in watch.calls if name == "multinomial"]
    steps = tokens.size(1) - 1
    assert len(draws) >= steps - 1 and len(draws) <= steps, (
        f"sample_decode made {len(draws)} torch.multinomial calls for {steps} steps: exactly one per step for the whole "
        f"batch [{group('sampling')}]")
    rows = sorted({shapes[0][0] for shapes in draws if shapes})
    assert rows == [SRC.size(0)], (
        f"torch.multinomial got probabilities for {rows} rows; every step draws for every row of the batch "
        f"(B = {SRC.size(0)}, finished rows too: their draw is then replaced by pad_id), so that the same seed "
        f"gives the same tokens [{group('sampling')}]")


def _no_eos(model):
    with torch.no_grad():
        model.generator.bias[EOS] = -1e4
    return model


def test_cached_step_work_does_not_grow_and_memory_is_projected_once():
    from torch.utils.flop_counter import FlopCounterMode
    model = _no_eos(_random_model(norm_first=True)).float().eval()
    src = torch.tensor([[3, 4, 5, 6, 7, 8, 9], [9, 8, 7, 0, 0, 0, 0], [3, 3, 3, 3, 0, 0, 0]])   # Ls = 7
    src_mask = (src != PAD)[:, None, :]
    flops, memory_shaped = {}, {}
    for n in (2, 3, 5, 6):
        with FlopCounterMode(display=False) as counter, _Watch() as watch:
            greedy_decode_cached(model, src, src_mask, n, BOS, EOS, PAD)
        flops[n] = counter.get_total_flops()
        memory_shaped[n] = sum(1 for _, shapes in watch.calls if any(sh[-2:] == (7, 16) for sh in shapes if len(sh) >= 2))
    early, late = flops[3] - flops[2], flops[6] - flops[5]
    assert late < 1.3 * early, (
        f"greedy_decode_cached: step 3 costs {early:,} matmul FLOPs, step 6 {late:,}: the work of a cached step should "
        "be that of the newest position alone (projections, attention over the cached positions and memory, "
        f"feed-forward, generator), not the whole prefix again [{group('kv_cache')}]")
    assert memory_shaped[2] == memory_shaped[5], (
        f"greedy_decode_cached works on memory-shaped tensors [B, Ls, d_model] {memory_shaped[2]} times for 2 steps and "
        f"{memory_shaped[5]} times for 5: project memory's cross-attention keys and values once, before the first step "
        f"[{group('kv_cache')}]")
