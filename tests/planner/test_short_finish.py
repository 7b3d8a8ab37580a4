"""short_finish: a plan ends with requests whose max_tokens keeps them short, enough to cover the longest other cap."""
import numpy as np

from blendserve.planner import plan
from blendserve.planner.tail import SHORT_SHARE, short_finish
from blendserve.planner.workload import Workload

from .strategies import GPU, MODEL

TAIL_AT = 10_000.0


def _arrays():
    """Ids 0-5 chats capped at 8192 (loose: bound 500), 6-9 short (cap 256, 3000 tokens each), 10 a video
    description (bound 32768: the tail). One token rides in each step of the drain (ride 1)."""
    cap = np.array([8192] * 6 + [256] * 4 + [32768])
    longest = np.where(cap == 8192, 500, cap).astype(float)
    tokens = np.where(cap == 256, 3000.0, 50.0)
    return cap, longest, tokens


def _finish(*args):
    kept, finish = short_finish(*args)
    return np.concatenate([kept, finish])


def test_the_last_short_requests_move_to_the_end_until_their_steps_cover_the_longest_other_cap():
    cap, longest, tokens = _arrays()
    order = np.array([0, 6, 1, 7, 10, 2, 8, 3, 9, 4, 5])
    out = _finish(order, cap, longest, tokens, TAIL_AT, 1.0)
    # Behind the last chat: 7, 8, 9 (9000 tokens >= 8192 x 1); 6 is not needed and keeps its place; so does the tail.
    assert out.tolist() == [0, 6, 1, 10, 2, 3, 4, 5, 7, 8, 9]


def test_the_tail_sets_no_window_and_is_never_moved():
    cap, longest, tokens = _arrays()
    cap[:6] = 2048                       # the longest other cap is now 2048: 256 is still short (<= 2048 / 8)
    order = np.array([10, 6, 0, 7, 1, 8, 2, 9, 3, 4, 5])
    out = _finish(order, cap, longest, tokens, TAIL_AT, 1.0)
    assert out.tolist() == [10, 6, 0, 7, 1, 8, 2, 3, 4, 5, 9]    # one short request (3000 tokens) covers 2048
    assert SHORT_SHARE * 2048 >= 256
    kept, finish = short_finish(order, cap, longest, tokens, TAIL_AT, 2.0)   # two ranks: 2048 tokens each
    assert finish.tolist() == [8, 9] and kept.tolist() == [10, 6, 0, 7, 1, 2, 3, 4, 5]


def test_nothing_moves_without_requests_capped_short():
    cap, longest, tokens = _arrays()
    order = np.arange(11)[::-1].copy()
    cap[6:10] = 4096                     # above 8192 x SHORT_SHARE: not known short
    assert _finish(order, cap, longest, tokens, TAIL_AT, 1.0).tolist() == order.tolist()
    assert _finish(order[:1], cap, longest, tokens, TAIL_AT, 1.0).tolist() == [10]
    assert _finish(order[:0], cap, longest, tokens, TAIL_AT, 1.0).tolist() == []


def _chats_and_questions(n=2000, seed=0):
    """Unshared chats capped at 8192 that decode 10 (their bound: the estimate, below a tenth of the run's
    steps, so not the tail) and few-shot questions capped at 16 under five long prefixes."""
    rng = np.random.default_rng(seed)
    prefixes = [list(rng.integers(0, 50_000, 600)) for _ in range(5)]
    prompts, outs, caps = [], [], []
    for i in range(n):
        if rng.random() < 0.4:
            prompts.append(prefixes[i % 5] + list(rng.integers(0, 50_000, 80)))
            outs.append(2.0)
            caps.append(16)
        else:
            prompts.append(list(rng.integers(0, 50_000, 500)))
            outs.append(10.0)
            caps.append(8192)
    w = Workload.from_lists(prompts, caps, outs)
    w.bound = np.minimum(w.max_tokens, np.ceil(w.output_len)).astype(np.int32)
    return w


def test_every_rank_of_a_blendserve_plan_ends_with_its_short_requests():
    w = _chats_and_questions()
    for ranks in (1, 2):
        pl = plan(w, MODEL, GPU, "blendserve", ranks=ranks)
        assert pl.stats["finish_requests"] == (w.max_tokens == 16).sum()     # 8192 x 153 tokens a rank: all
        assert sorted(pl.order.tolist()) == list(range(w.n))
        for piece in pl.rank_orders:
            caps = w.max_tokens[piece]
            last_chat = np.flatnonzero(caps == 8192).max()
            assert last_chat < len(piece) - 1 and (caps[last_chat + 1:] == 16).all()
    dfs = plan(w, MODEL, GPU, "dfs")
    assert pl.sharing_ratio >= 0.99 * dfs.sharing_ratio       # the moved block keeps its prefix order
