"""Exact lexicographic order of the prompts and the LCP of sorted neighbours.

This is the foundation of the prefix tree (tree.py builds the compressed radix
tree from these two arrays alone), so it has to be exact and fast: 400K
prompts / 200M tokens in seconds on two cores, with no per-token Python.

Method: MSD refinement of groups of prompts known to share a prefix.
Each round, for every unresolved group,
  1. skip ahead: the group's common prefix is extended by comparing every
     member with the group's first member in growing vectorised blocks, so a
     2,000-token shared system prompt costs one pass over its tokens, not
     2,000 / k sort rounds;
  2. the next few tokens after the common prefix are packed into uint64 words
     (an end-of-prompt sentinel sorts first) and the members are sorted by
     (group, words) with one numpy lexsort;
  3. neighbours whose words differ get their LCP from the first differing
     packed field; runs of equal words form the next round's groups.
Every round splits every group it touches, so rounds are bounded by the
depth of branching in the trie, not by prompt length.
"""
from __future__ import annotations

import numpy as np

from .arrayops import ragged_arange

_WORDS = 2                       # packed uint64 words compared per round
_BLOCK_ELEMS = 1 << 22           # cap on elements gathered per comparison block


def _packing(tokens: np.ndarray) -> tuple[int, int, int]:
    """(offset, bits per token, tokens per word) so that token - offset + 1 fits."""
    if tokens.size == 0:
        return 0, 21, 3
    lo = int(tokens.min())
    span = int(tokens.max()) - lo + 1          # largest packed value
    for bits, per_word in ((21, 3), (32, 2), (63, 1)):
        if span < (1 << bits):
            return lo, bits, per_word
    raise AssertionError("int32 tokens always fit 63 bits")


def _rows(tokens: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """tokens[s:s+width] for every s, as a 2-D array (out-of-range tail positions hold junk).

    Rows are copied from a sliding-window view, one memcpy each, which is
    several times faster than gathering through a 2-D index array.
    """
    last_row = len(tokens) - width
    out = np.empty((len(starts), width), dtype=tokens.dtype)
    safe = starts <= last_row
    if last_row >= 0:
        view = np.lib.stride_tricks.sliding_window_view(tokens, width)
        out[safe] = view[starts[safe]]
    if not safe.all():
        tail = np.minimum(starts[~safe, None] + np.arange(width), len(tokens) - 1)
        out[~safe] = tokens[tail]
    return out


def common_prefix(tokens: np.ndarray, a: np.ndarray, b: np.ndarray,
                  start: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Length of the common prefix of tokens[a:a+limit] and tokens[b:b+limit], known to be >= start.

    Two steps. (1) Probe single tokens at start, start+1, start+3, ... and
    bisect, to find for every pair some position c where the tokens differ
    (or c = limit): a few cheap gathers of one token per pair. (2) Verify
    [start, c) with whole-row compares, bucketed by width: the first mismatch
    found there is the answer, otherwise c is. Exact, and the bulk work is one
    contiguous read of the shared tokens.
    """
    start = np.minimum(np.asarray(start, dtype=np.int64), limit)
    if len(tokens) == 0:
        return start

    def differs(p: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return (p >= limit[idx]) | (tokens[np.minimum(a[idx] + p, len(tokens) - 1)]
                                    != tokens[np.minimum(b[idx] + p, len(tokens) - 1)])

    c = limit.copy()
    eq = start - 1                                  # last probe known equal
    live = np.flatnonzero(start < limit)
    step = 1
    while live.size:                                # gallop
        p = np.minimum(start[live] + step - 1, limit[live])
        d = differs(p, live)
        c[live[d]] = p[d]
        eq[live[~d]] = p[~d]
        live = live[~d]
        step *= 2
    live = np.flatnonzero(c - eq > 1)
    while live.size:                                # bisect between eq and c
        mid = (eq[live] + c[live]) // 2
        d = differs(mid, live)
        c[live[d]] = mid[d]
        eq[live[~d]] = mid[~d]
        live = live[c[live] - eq[live] > 1]

    out = c.copy()
    span = c - start
    live = np.flatnonzero(span > 0)
    if live.size:
        bucket = np.ceil(np.log2(span[live])).astype(np.int64)
        for k in np.unique(bucket):
            width = 1 << int(k)
            members = live[bucket == k]
            chunk = max(1, _BLOCK_ELEMS // width)
            for i in range(0, len(members), chunk):
                m = members[i:i + chunk]
                stop = _rows(tokens, a[m] + start[m], width) != _rows(tokens, b[m] + start[m], width)
                stop &= np.arange(width) < span[m, None]
                hit = stop.any(axis=1)
                out[m[hit]] = start[m[hit]] + stop[hit].argmax(axis=1)
    return out


def _pack_words(tokens: np.ndarray, starts: np.ndarray, lens: np.ndarray, depth: np.ndarray,
                lo: int, bits: int, per_word: int) -> list[np.ndarray]:
    """The next _WORDS * per_word tokens after `depth` of each prompt, packed big-end first."""
    words = []
    last = max(len(tokens) - 1, 0)
    for w in range(_WORDS):
        word = np.zeros(len(starts), dtype=np.uint64)
        for f in range(per_word):
            d = depth + (w * per_word + f)
            ok = d < lens
            v = np.where(ok, tokens[np.minimum(starts + d, last)].astype(np.int64) - lo + 1, 0)
            word |= v.astype(np.uint64) << np.uint64(bits * (per_word - 1 - f))
        words.append(word)
    return words


def _equal_fields(x: np.ndarray, bits: int, per_word: int) -> np.ndarray:
    """Leading packed fields equal in two words, given their XOR x (x != 0)."""
    eq = np.zeros(len(x), dtype=np.int64)
    for f in range(1, per_word):
        eq += (x < (np.uint64(1) << np.uint64(bits * (per_word - f)))).astype(np.int64)
    return eq


def _neighbours_equal(words: list[np.ndarray], bits: int, per_word: int) -> tuple[np.ndarray, np.ndarray]:
    """For each pair of neighbours in sorted order: whether all their packed words are equal, and how many
    leading fields (tokens) they share."""
    eq_words = np.zeros(len(words[0]) - 1, dtype=np.int64)
    still = np.ones(len(words[0]) - 1, dtype=bool)
    for w in words:
        x = w[1:] ^ w[:-1]
        differ = still & (x != 0)
        eq_words[differ] += _equal_fields(x[differ], bits, per_word)
        eq_words[still & (x == 0)] += per_word
        still &= x == 0
    return still, eq_words


def sort_prompts(tokens: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lexicographic order of the prompts and the LCP array.

    Returns (order, lcp): order[k] is the request at sorted position k (a
    prompt sorts before its extensions; identical prompts keep input order);
    lcp[k] = longest common prefix of prompts order[k-1] and order[k], lcp[0] = 0.
    """
    n = len(offsets) - 1
    starts = offsets[:-1]
    lens = np.diff(offsets)
    order = np.arange(n, dtype=np.int64)
    lcp = np.zeros(n, dtype=np.int64)
    if n <= 1 or tokens.size == 0:
        return order, lcp
    lo, bits, per_word = _packing(tokens)
    per_round = _WORDS * per_word

    g_lo, g_hi, g_depth = np.array([0], dtype=np.int64), np.array([n], dtype=np.int64), np.zeros(1, dtype=np.int64)
    while g_lo.size:
        sizes = g_hi - g_lo
        gid = np.repeat(np.arange(len(g_lo), dtype=np.int64), sizes)
        pos = np.repeat(g_lo, sizes) + ragged_arange(sizes)
        req = order[pos]
        st, ln = starts[req], lens[req]
        first = np.repeat(order[g_lo], sizes)
        is_first = req == first
        limit = np.where(is_first, 0, np.minimum(ln, lens[first]))
        seg = np.cumsum(sizes) - sizes
        cp = common_prefix(tokens, st, starts[first], np.repeat(g_depth, sizes), limit)
        cp[is_first] = ln[is_first]
        depth = np.minimum.reduceat(cp, seg)

        d_m = depth[gid]
        words = _pack_words(tokens, st, ln, d_m, lo, bits, per_word)
        perm = np.lexsort(tuple(reversed(words)) + (gid,))
        req, ln, d_m, gid = req[perm], ln[perm], d_m[perm], gid[perm]
        words = [w[perm] for w in words]
        order[pos] = req

        # Boundaries inside groups where the packed words differ.
        same_group = gid[1:] == gid[:-1]
        still, eq_words = _neighbours_equal(words, bits, per_word)
        cut = same_group & ~still
        lcp[pos[1:][cut]] = d_m[1:][cut] + eq_words[cut]

        # Runs of equal words: finished if the prompts ended inside the words.
        run_start = np.flatnonzero(np.concatenate(([True], ~(same_group & still))))
        run_len = np.diff(np.append(run_start, len(req)))
        multi = run_len > 1
        rs, rl = run_start[multi], run_len[multi]
        ended = ln[rs] < d_m[rs] + per_round
        if ended.any():
            inner = np.repeat(rs[ended], rl[ended] - 1) + ragged_arange(rl[ended] - 1) + 1
            lcp[pos[inner]] = ln[inner]
        rs, rl = rs[~ended], rl[~ended]
        g_lo = pos[rs]
        g_hi = g_lo + rl
        g_depth = d_m[rs] + per_round
    return order, lcp
