"""Public tests for milestone 6. Run `pytest -q` in this folder (about 10 seconds: two tiny models are
trained to copy first, so the decoders have something sensible to decode).

A useful subset of the grader's checks: greedy decoding against a plain loop, the output format,
the KV cache giving greedy's tokens, sampling filters and seeding, and beam search against an
exhaustive search on a tiny vocabulary. The hidden checks go further (pre-LN caches, work per
cached step, one multinomial call per step, batch invariance, modes, no loops over the batch, ...).
"""
import math

import pytest
import torch
import torch.nn.functional as F

from attention import causal_mask
from decoding import beam_search, greedy_decode, greedy_decode_cached, sample_decode
from model import Transformer

PAD, BOS, EOS, V = 0, 1, 2, 10


def _train_copy_model(norm_first):
    """A small 2-layer Transformer trained for a few seconds to copy 1..6 tokens (ids 3..9). Its copies
    are imperfect, which is fine: what matters is that its outputs vary with the source."""
    torch.manual_seed(0)
    model = Transformer(V, V, d_model=32, num_heads=2, num_layers=2, d_ff=64, dropout=0.1, max_len=32,
                        norm_first=norm_first)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(120):
        lengths = torch.randint(1, 7, (32,), generator=gen)
        src = torch.randint(3, V, (32, 6), generator=gen)
        src = src.masked_fill(torch.arange(6)[None, :] >= lengths[:, None], PAD)
        tgt_in = torch.cat([torch.full((32, 1), BOS), src], dim=1)
        tgt_out = torch.cat([src, torch.full((32, 1), PAD)], dim=1)
        tgt_out[torch.arange(32), lengths] = EOS
        tgt_mask = causal_mask(7) & (tgt_in != PAD)[:, None, :]
        logits = model(src, tgt_in, (src != PAD)[:, None, :], tgt_mask)
        loss = F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.train()                                   # left in train mode on purpose (dropout 0.1)


@pytest.fixture(scope="module")
def copy_model():
    return _train_copy_model(norm_first=False)


@pytest.fixture(scope="module")
def copy_model_pre_ln():
    return _train_copy_model(norm_first=True)


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
    assert got.size(1) < 11, "every sequence ended with eos, so the loop should stop early (T < max_len + 1)"


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
    assert math.isclose(scores[0].item(), want_score, rel_tol=1e-9, abs_tol=1e-12), (
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
