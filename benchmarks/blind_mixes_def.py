#!/usr/bin/env python3
"""Blind token-level batch workloads mixD / mixE / mixF for the BlendServe planner.

Written without reading the planner, simulator, benchmarks or tests.  Python 3.11,
stdlib + numpy only.  Deterministic: every random draw comes from one
numpy Generator seeded with SEED (and sub-generators spawned from it).

Each request kind imitates one dataset of the BlendServe paper (mean prompt p,
mean output d, share of prompt tokens in a prefix shared with other requests):

  burstgpt  p~244  d~27     sharing ~2%   (a few API clients with fixed system prompts)
  mmlu      p~804  d~2      sharing ~86%  (57 subjects x eval-run template = few-shot prefix;
                                           unique question)
  openvid   p~121  d~16000  sharing ~0%   (long video-caption generations, spread +-30%)
  wildchat  p~496  d~510    sharing ~19%  (some system prompts, multi-turn histories:
                                           turn k's prompt = turn k-1's prompt + its
                                           answer + the new user message)
  sharegpt  p~300  d~350    sharing ~2%   (first turns; a few recurring instruction templates)
  azure     p~2508 d~23     sharing ~1%   (code / conversation trace; some tool preambles)

No per-kind marker token opens the requests; token ids follow a Zipf-Mandelbrot
law over the vocabulary [100, 120000) with a noisy rank->id map (frequent BPE
tokens tend to have low ids), so random prompts share only the odd first token.

Requests are interleaved by simulated arrival over one day: chat traffic with a
diurnal profile (BurstGPT in bursts), WildChat conversations with think time
between turns, MMLU eval runs that sweep subject by subject in a few minutes,
Azure clients in business-hour bursts, OpenVid as a few bulk submissions.
The file order is arrival order.

Usage: python -m benchmarks.blind_mixes_def [--out DIR] [--requests N] [--only mixD,mixE]
Writes DIR/mixX.jsonl and DIR/summary_mixX.json, DIR/summary.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

SEED = 20240621
VOCAB_LO, VOCAB_HI = 100, 120000
DAY = 86400.0
KINDS = ["burstgpt", "mmlu", "openvid", "wildchat", "sharegpt", "azure"]

# ---------------------------------------------------------------- mixes
# share of requests per kind, and max_tokens caps per kind.  A cap spec is
# either an int (one cap for the whole job) or a list of (cap, probability):
# the cap of a client / user, drawn per request (per conversation for WildChat).
MIXES = {
    # summarisation / classification heavy: Azure + MMLU carry most prompt tokens;
    # enterprise pipelines with tight caps; 1% long generations.
    "mixD": {
        "share": {"burstgpt": 0.41, "mmlu": 0.24, "openvid": 0.01,
                  "wildchat": 0.15, "sharegpt": 0.14, "azure": 0.05},
        "caps": {
            "burstgpt": [(256, 0.3), (512, 0.4), (1024, 0.3)],
            "mmlu": 8,
            "openvid": 32768,
            "wildchat": [(1024, 0.5), (2048, 0.5)],
            "sharegpt": [(1024, 0.5), (2048, 0.5)],
            "azure": [(64, 0.2), (256, 0.5), (1024, 0.3)],
        },
        "mmlu_runs": [1.0, 0.75],          # eval runs (fraction of MMLU test set each)
        "openvid_jobs": 1,
    },
    # balanced all-kinds mix, 4% long generations, medium caps; OpenVid cap
    # 20480 truncates the upper tail of the captions.
    "mixE": {
        "share": {"burstgpt": 0.28, "mmlu": 0.16, "openvid": 0.04,
                  "wildchat": 0.24, "sharegpt": 0.23, "azure": 0.05},
        "caps": {
            "burstgpt": [(512, 0.2), (1024, 0.3), (2048, 0.3), (4096, 0.2)],
            "mmlu": 32,
            "openvid": 20480,
            "wildchat": [(2048, 0.4), (4096, 0.6)],
            "sharegpt": [(2048, 0.5), (4096, 0.5)],
            "azure": [(128, 0.3), (512, 0.4), (2048, 0.3)],
        },
        "mmlu_runs": [0.6, 0.54],
        "openvid_jobs": 3,
    },
    # chat only plus MMLU, no long generations; one generous cap per job
    # (8192 for every chat request, lm-eval's default 256 for MMLU).
    "mixF": {
        "share": {"burstgpt": 0.36, "mmlu": 0.12, "openvid": 0.0,
                  "wildchat": 0.27, "sharegpt": 0.25, "azure": 0.0},
        "caps": {
            "burstgpt": 8192, "mmlu": 256, "openvid": 0,
            "wildchat": 8192, "sharegpt": 8192, "azure": 0,
        },
        "mmlu_runs": [0.86],
        "openvid_jobs": 0,
    },
}


# ---------------------------------------------------------------- building blocks
class Vocab:
    """Zipf-Mandelbrot token law with a noisy rank -> id map."""

    def __init__(self, rng: np.random.Generator, s: float = 1.1, q: float = 2.7):
        n = VOCAB_HI - VOCAB_LO
        ranks = np.arange(n, dtype=np.float64)
        w = 1.0 / (ranks + q) ** s
        self.cdf = np.cumsum(w) / w.sum()
        # noisy monotone map: frequent ranks get mostly low ids
        key = (ranks + 1.0) * np.exp(rng.normal(0.0, 1.0, n))
        self.rank_to_id = (np.argsort(np.argsort(key)) + VOCAB_LO).astype(np.int32)

    def draw(self, rng: np.random.Generator, k: int) -> np.ndarray:
        r = np.searchsorted(self.cdf, rng.random(k), side="right")
        r = np.minimum(r, len(self.cdf) - 1)
        return self.rank_to_id[r]


def lognormal(rng, mean, sigma, size, lo, hi):
    mu = math.log(mean) - sigma * sigma / 2.0
    x = rng.lognormal(mu, sigma, size)
    return np.clip(np.rint(x), lo, hi).astype(np.int64)


def draw_caps(rng, spec, size):
    if isinstance(spec, int):
        return np.full(size, spec, dtype=np.int64)
    caps = np.array([c for c, _ in spec], dtype=np.int64)
    p = np.array([q for _, q in spec], dtype=np.float64)
    return caps[rng.choice(len(caps), size=size, p=p / p.sum())]


def diurnal_times(rng, n, peak_hour=15.0, amp=0.6, business=False):
    """n arrival times in [0, DAY) from a diurnal density (rejection sampling)."""
    out = np.empty(0)
    while len(out) < n:
        t = rng.random(2 * n + 16) * DAY
        h = t / 3600.0
        dens = 1.0 + amp * np.cos(2 * math.pi * (h - peak_hour) / 24.0)
        if business:
            dens = dens * np.where((h >= 8) & (h < 19), 1.0, 0.25)
        keep = rng.random(len(t)) * (1.0 + amp) < dens
        out = np.concatenate([out, t[keep]])
    return np.sort(out[:n])


def bursty_times(rng, n, mean_burst, spread_s, **kw):
    """Bursts of geometric size around diurnal centres (BurstGPT-like)."""
    sizes = []
    tot = 0
    while tot < n:
        s = int(rng.geometric(1.0 / mean_burst))
        s = min(s, n - tot)
        sizes.append(s)
        tot += s
    centres = diurnal_times(rng, len(sizes), **kw)
    t = np.repeat(centres, sizes) + rng.exponential(spread_s, n)
    return np.mod(t, DAY)


class Req:
    __slots__ = ("kind", "t", "segs", "out", "cap")

    def __init__(self, kind, t, segs, out, cap):
        self.kind, self.t, self.segs, self.out, self.cap = kind, t, segs, out, cap

    @property
    def plen(self):
        return sum(len(s) for s in self.segs)


# ---------------------------------------------------------------- kinds
def prefix_pool(rng, vocab, n, mean, sigma, lo, hi):
    lens = lognormal(rng, mean, sigma, n, lo, hi)
    pop = 1.0 / np.arange(1, n + 1) ** 0.9          # Zipf popularity of the clients
    return [vocab.draw(rng, int(L)) for L in lens], pop / pop.sum()


def gen_burstgpt(rng, vocab, n, capspec):
    pool, pop = prefix_pool(rng, vocab, 15, 60, 0.5, 15, 300)
    has_sys = rng.random(n) < 0.08
    which = rng.choice(len(pool), size=n, p=pop)
    body = lognormal(rng, 240, 1.0, n, 3, 8000)
    out = lognormal(rng, 27, 1.1, n, 1, 3000)
    caps = draw_caps(rng, capspec, n)
    ts = bursty_times(rng, n, mean_burst=25, spread_s=40.0)
    reqs = []
    for i in range(n):
        segs = [pool[which[i]]] if has_sys[i] else []
        segs.append(vocab.draw(rng, int(body[i])))
        reqs.append(Req("burstgpt", ts[i], segs, int(min(out[i], caps[i])), int(caps[i])))
    return reqs


def gen_sharegpt(rng, vocab, n, capspec):
    pool, pop = prefix_pool(rng, vocab, 25, 110, 0.5, 20, 500)
    has_t = rng.random(n) < 0.055
    which = rng.choice(len(pool), size=n, p=pop)
    body = lognormal(rng, 300, 1.1, n, 2, 12000)
    out = lognormal(rng, 350, 0.9, n, 1, 6000)
    caps = draw_caps(rng, capspec, n)
    ts = diurnal_times(rng, n, peak_hour=16.0, amp=0.5)
    reqs = []
    for i in range(n):
        segs = [pool[which[i]]] if has_t[i] else []
        segs.append(vocab.draw(rng, int(body[i])))
        reqs.append(Req("sharegpt", ts[i], segs, int(min(out[i], caps[i])), int(caps[i])))
    return reqs


def gen_azure(rng, vocab, n, capspec):
    pool, pop = prefix_pool(rng, vocab, 10, 260, 0.4, 60, 900)
    has_pre = rng.random(n) < 0.10
    which = rng.choice(len(pool), size=n, p=pop)
    body = lognormal(rng, 2560, 0.95, n, 16, 16000)
    out = lognormal(rng, 23, 1.0, n, 1, 1500)
    caps = draw_caps(rng, capspec, n)
    ts = bursty_times(rng, n, mean_burst=12, spread_s=90.0, peak_hour=13.0, business=True)
    reqs = []
    for i in range(n):
        segs = [pool[which[i]]] if has_pre[i] else []
        segs.append(vocab.draw(rng, int(body[i])))
        reqs.append(Req("azure", ts[i], segs, int(min(out[i], caps[i])), int(caps[i])))
    return reqs


def gen_openvid(rng, vocab, n, capspec, jobs):
    if n == 0:
        return []
    p = lognormal(rng, 121, 0.45, n, 20, 600)
    out = lognormal(rng, 16000, 0.30, n, 3000, 40000)
    caps = draw_caps(rng, capspec, n)
    starts = np.sort(rng.random(max(jobs, 1)) * DAY * 0.9)
    job = rng.integers(0, len(starts), n)
    ts = starts[job] + rng.random(n) * 600.0        # each bulk job submitted over 10 min
    return [Req("openvid", ts[i], [vocab.draw(rng, int(p[i]))], int(min(out[i], caps[i])),
                int(caps[i])) for i in range(n)]


def gen_mmlu(rng, vocab, n, capspec, runs):
    """Eval runs; each run has its own template => own few-shot prefix per subject."""
    if n == 0:
        return []
    S = 57
    sizes = lognormal(rng, 246, 0.7, S, 100, 1534).astype(np.float64)
    sizes = np.maximum(100, np.rint(sizes * 14042 / sizes.sum())).astype(np.int64)
    shot_len = lognormal(rng, 690, 0.35, S, 250, 2600)     # 5-shot prefix per subject
    q_mean = lognormal(rng, 114, 0.3, S, 40, 400)          # question length per subject
    qs = [[None] * int(sizes[s]) for s in range(S)]        # question tokens, lazily drawn
    qlen = [lognormal(rng, float(q_mean[s]), 0.5, int(sizes[s]), 12, 1500) for s in range(S)]
    # questions per run, scaled so the total is n
    want = np.array(runs, dtype=np.float64)
    per_run = np.floor(want / want.sum() * n).astype(np.int64)
    per_run[0] += n - per_run.sum()
    caps_all = draw_caps(rng, capspec, n)
    d_choices = np.array([1, 2, 3, 4, 5, 6, 8, 10, 12])
    d_probs = np.array([0.35, 0.45, 0.12, 0.04, 0.015, 0.01, 0.007, 0.005, 0.003])
    reqs = []
    k = 0
    for _run, m in enumerate(per_run):
        scale = 1.0 + rng.normal(0, 0.08)                  # template variant of this run
        prefixes = [vocab.draw(rng, max(50, int(shot_len[s] * scale))) for s in range(S)]
        # pick m questions: proportional per subject, whole set cycled if m > 14042
        total = int(sizes.sum())
        take = np.floor(sizes / total * m).astype(np.int64)
        rest = m - take.sum()
        np.add.at(take, rng.choice(S, size=int(rest), p=sizes / total), 1)
        order = rng.permutation(S)                          # subject sweep order
        t = rng.random() * DAY * 0.85
        rate = rng.uniform(30.0, 80.0)                      # requests / s of the harness
        for s in order:
            idx = np.arange(int(take[s])) % int(sizes[s])
            if take[s] <= sizes[s]:
                idx = np.sort(rng.choice(int(sizes[s]), size=int(take[s]), replace=False))
            for j in idx:
                if qs[s][j] is None:
                    qs[s][j] = vocab.draw(rng, int(qlen[s][j]))
                d = int(rng.choice(d_choices, p=d_probs / d_probs.sum()))
                cap = int(caps_all[k])
                t += rng.exponential(1.0 / rate)
                reqs.append(Req("mmlu", t, [prefixes[s], qs[s][j]], min(d, cap), cap))
                k += 1
    return reqs


def gen_wildchat(rng, vocab, n, capspec):
    """Conversations; every turn is a request whose prompt holds the history."""
    if n == 0:
        return []
    pool, pop = prefix_pool(rng, vocab, 40, 230, 0.6, 20, 1500)
    reqs = []
    starts_needed = int(n / 1.1) + 64
    starts = diurnal_times(rng, starts_needed, peak_hour=14.0, amp=0.5)
    ci = 0
    MAXCTX = 24000
    while len(reqs) < n:
        if ci >= len(starts):
            starts = np.concatenate([starts, diurnal_times(rng, 1024, peak_hour=14.0)])
        t = float(starts[ci])
        ci += 1
        turns = 1
        while rng.random() < 0.11 and turns < 15:
            turns += 1
        cap = int(draw_caps(rng, capspec, 1)[0])
        sys_seg = [pool[rng.choice(len(pool), p=pop)]] if rng.random() < 0.22 else []
        hist: list[np.ndarray] = []                          # alternating user / assistant
        for _turn in range(turns):
            if len(reqs) >= n:
                break
            u = vocab.draw(rng, int(lognormal(rng, 340, 1.2, 1, 2, 12000)[0]))
            hist.append(u)
            # context window: drop the oldest exchanges (breaks the shared prefix)
            while sum(len(x) for x in sys_seg + hist) > MAXCTX and len(hist) > 1:
                hist = hist[2:] if len(hist) > 2 else hist[1:]
            d = int(min(lognormal(rng, 510, 0.85, 1, 1, 8000)[0], cap))
            reqs.append(Req("wildchat", t, sys_seg + list(hist), d, cap))
            a = vocab.draw(rng, d)                           # the answer, as in the dataset
            hist.append(a)
            t += rng.exponential(90.0) + d / 40.0            # read + think + type
    return reqs


# ---------------------------------------------------------------- stats
def sharing_stats(prompts: list[np.ndarray]):
    """(dedup, in_shared): 1 - distinct trie tokens / total, and share of tokens
    lying in a prefix that at least one other request also has."""
    if not prompts:
        return 0.0, 0.0
    keys = [p.astype(">u4").tobytes() for p in prompts]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    lens = np.array([len(prompts[i]) for i in order], dtype=np.int64)
    lcp = np.zeros(len(order), dtype=np.int64)              # lcp with previous in order
    for j in range(1, len(order)):
        a, b = prompts[order[j - 1]], prompts[order[j]]
        m = min(len(a), len(b))
        ne = np.flatnonzero(a[:m] != b[:m])
        lcp[j] = ne[0] if len(ne) else m
    total = lens.sum()
    distinct = (lens - lcp).sum()
    nxt = np.concatenate([lcp[1:], [0]])
    shared = np.maximum(lcp, nxt).sum()
    return 1.0 - distinct / total, shared / total


def build_mix(name, n, rng, vocab):
    spec = MIXES[name]
    share = spec["share"]
    counts = {k: int(round(share[k] * n)) for k in KINDS}
    counts["burstgpt"] += n - sum(counts.values())
    caps = spec["caps"]
    sub = {k: np.random.default_rng(rng.integers(1 << 62)) for k in KINDS}
    reqs = []
    reqs += gen_burstgpt(sub["burstgpt"], vocab, counts["burstgpt"], caps["burstgpt"])
    reqs += gen_mmlu(sub["mmlu"], vocab, counts["mmlu"], caps["mmlu"], spec["mmlu_runs"])
    reqs += gen_openvid(sub["openvid"], vocab, counts["openvid"], caps["openvid"],
                        spec["openvid_jobs"])
    reqs += gen_wildchat(sub["wildchat"], vocab, counts["wildchat"], caps["wildchat"])
    reqs += gen_sharegpt(sub["sharegpt"], vocab, counts["sharegpt"], caps["sharegpt"])
    reqs += gen_azure(sub["azure"], vocab, counts["azure"], caps["azure"])
    # arrival order; ties broken by a random key (stable, deterministic)
    tie = rng.random(len(reqs))
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i].t, tie[i]))
    return [reqs[i] for i in order], counts


def write_mix(name, reqs, outdir):
    path = os.path.join(outdir, f"{name}.jsonl")
    prompts = []
    with open(path, "w") as f:
        for r in reqs:
            ids = np.concatenate(r.segs) if len(r.segs) > 1 else r.segs[0]
            assert 0 < r.out <= r.cap
            assert ids.min() >= VOCAB_LO and ids.max() < VOCAB_HI and len(ids) > 0
            prompts.append(ids)
            f.write('{"input_ids":[' + ",".join(map(str, ids.tolist())) +
                    f'],"output_len":{r.out:d},"max_tokens":{r.cap:d}}}\n')
    return path, prompts


def summarise(name, reqs, prompts, path):
    s = {"mix": name, "file": os.path.basename(path), "bytes": os.path.getsize(path),
         "requests": len(reqs), "kinds": {}}
    kinds = np.array([r.kind for r in reqs])
    P = np.array([len(p) for p in prompts], dtype=np.int64)
    D = np.array([r.out for r in reqs], dtype=np.int64)
    C = np.array([r.cap for r in reqs], dtype=np.int64)
    for k in KINDS:
        idx = np.flatnonzero(kinds == k)
        if len(idx) == 0:
            continue
        dd, sh = sharing_stats([prompts[i] for i in idx])
        s["kinds"][k] = {
            "count": int(len(idx)), "mean_p": float(P[idx].mean()),
            "mean_d": float(D[idx].mean()), "p50_p": float(np.median(P[idx])),
            "p99_p": float(np.percentile(P[idx], 99)),
            "p50_d": float(np.median(D[idx])), "p99_d": float(np.percentile(D[idx], 99)),
            "prompt_tokens": int(P[idx].sum()), "output_tokens": int(D[idx].sum()),
            "shared_in_prefix": sh, "dedup_saving": dd,
            "caps": {str(c): int(v) for c, v in zip(*np.unique(C[idx], return_counts=True))},
            "hit_cap": float((D[idx] == C[idx]).mean()),
        }
    dd, sh = sharing_stats(prompts)
    s.update({"mean_p": float(P.mean()), "mean_d": float(D.mean()),
              "prompt_tokens": int(P.sum()), "output_tokens": int(D.sum()),
              "shared_in_prefix": sh, "dedup_saving": dd})
    return s


def md_summary(s):
    lines = [f"### {s['mix']} ({s['file']}, {s['bytes'] / 1e6:.0f} MB, {s['requests']} requests)",
             "",
             "| kind | count | mean p | p50/p99 p | mean d | p50/p99 d | prompt tok | output tok "
             "| shared-prefix tok | dedup saving | caps (count) | hit cap |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for k, v in s["kinds"].items():
        caps = ", ".join(f"{c}:{n}" for c, n in v["caps"].items())
        lines.append(
            f"| {k} | {v['count']} | {v['mean_p']:.0f} | {v['p50_p']:.0f}/{v['p99_p']:.0f} "
            f"| {v['mean_d']:.1f} | {v['p50_d']:.0f}/{v['p99_d']:.0f} | {v['prompt_tokens']:,} "
            f"| {v['output_tokens']:,} | {100 * v['shared_in_prefix']:.1f}% "
            f"| {100 * v['dedup_saving']:.1f}% | {caps} | {100 * v['hit_cap']:.1f}% |")
    lines.append(
        f"| **all** | {s['requests']} | {s['mean_p']:.0f} | | {s['mean_d']:.1f} | "
        f"| {s['prompt_tokens']:,} | {s['output_tokens']:,} | {100 * s['shared_in_prefix']:.1f}% "
        f"| {100 * s['dedup_saving']:.1f}% | | |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/blind_mixes")
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--only", default="mixD,mixE,mixF")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    root = np.random.default_rng(SEED)
    vocab = Vocab(np.random.default_rng(root.integers(1 << 62)))
    mix_seeds = {m: int(root.integers(1 << 62)) for m in MIXES}   # order-independent
    md = [f"# Workload summaries (generated by blind_mixes_def.py, seed {SEED})", ""]
    for name in a.only.split(","):
        t0 = time.time()
        rng = np.random.default_rng(mix_seeds[name])
        reqs, _ = build_mix(name, a.requests, rng, vocab)
        path, prompts = write_mix(name, reqs, a.out)
        s = summarise(name, reqs, prompts, path)
        with open(os.path.join(a.out, f"summary_{name}.json"), "w") as f:
            json.dump(s, f, indent=1)
        md.append(md_summary(s))
        print(md_summary(s), file=sys.stderr)
        print(f"{name}: {time.time() - t0:.1f}s", file=sys.stderr)
    if a.only == "mixD,mixE,mixF":
        with open(os.path.join(a.out, "summary.md"), "w") as f:
            f.write("\n".join(md))


if __name__ == "__main__":
    main()
