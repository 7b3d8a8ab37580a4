#!/usr/bin/env python3
"""Blind token-level workloads mixA / mixB / mixC for the BlendServe planner.

Written without reading the planner, the simulator or their tests. Writes
mixA.jsonl, mixB.jsonl and mixC.jsonl (100000 requests each), one JSON
object per line: {"input_ids": [...], "output_len": d, "max_tokens": m}.

Six request kinds modelled after the datasets in the BlendServe paper
(BurstGPT, MMLU, OpenVid, WildChat, ShareGPT, Azure trace). Lengths are
drawn from lognormal / mixture distributions; prefixes are shared only
where the real data shares them (MMLU few-shot prefixes per subject, common
chat openings, popular WildChat templates / system prompts, multi-turn
follow-ups and regenerations, Azure tool system prompts). There is NO
per-kind marker token.

Usage: python -m benchmarks.blind_mixes_abc [--seed 2121] [--out DIR] [--requests 100000]
       [--only mixA,mixB] [--no-write]
Stdlib + numpy only.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

VOCAB_LO, VOCAB_HI = 100, 120000
KINDS = ["burstgpt", "mmlu", "openvid", "wildchat", "sharegpt", "azure"]

# Mix proportions (fractions of requests). See README.md for the reasons.
MIXES = {
    "mixA": {"burstgpt": 0.31, "wildchat": 0.25, "sharegpt": 0.25,
             "mmlu": 0.14, "openvid": 0.02, "azure": 0.03},
    "mixB": {"mmlu": 0.40, "azure": 0.045, "burstgpt": 0.43,
             "sharegpt": 0.065, "wildchat": 0.055, "openvid": 0.005},
    "mixC": {"burstgpt": 0.24, "wildchat": 0.22, "sharegpt": 0.12,
             "mmlu": 0.24, "azure": 0.06, "openvid": 0.12},
}
# How requests are ordered inside each file (all are interleaved).
ORDERING = {"mixA": "uniform", "mixB": "bursty", "mixC": "drift"}


# --------------------------------------------------------------------------
# token text
# --------------------------------------------------------------------------
class Text:
    """Token ids roughly Zipfian by id, as in BPE vocabularies where frequent
    tokens got low ids: rank r has probability ~ 1/(r + 10), log-uniform-ish
    over [100, 120000). Makes the first token of unrelated prompts collide
    now and then, as real text does, without any planted marker."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.span = VOCAB_HI - VOCAB_LO
        self.base = (self.span + 10) / 10.0

    def __call__(self, n: int) -> np.ndarray:
        if n <= 0:
            return np.empty(0, dtype=np.int32)
        u = self.rng.random(n)
        r = np.floor(10.0 * np.power(self.base, u) - 10.0).astype(np.int64)
        r = np.clip(r, 0, self.span - 1)
        return (r + VOCAB_LO).astype(np.int32)


def lognormal_int(rng, median, sigma, lo, hi):
    x = rng.lognormal(np.log(median), sigma)
    return int(min(hi, max(lo, round(x))))


def zipf_choice(rng, n, a=1.1):
    w = 1.0 / np.power(np.arange(1, n + 1), a)
    return w / w.sum()


def choose_cap(rng, caps, probs):
    return int(caps[rng.choice(len(caps), p=probs)])


# --------------------------------------------------------------------------
# shared material (drawn once per seed, shared by all three mixes)
# --------------------------------------------------------------------------
class Shared:
    def __init__(self, seed: int):
        rng = np.random.default_rng([seed, 1])
        text = Text(rng)
        # common chat openings ("Write a ...", "Can you ...", "Translate ..."):
        # short, Zipf-popular, used by all chat kinds.
        self.openings = [text(int(rng.integers(3, 16))) for _ in range(80)]
        self.opening_p = zipf_choice(rng, len(self.openings), 1.0)
        # WildChat: popular user-side templates / system prompts (the
        # Midjourney prompt-generator template, role-play set-ups, ...).
        lens = [650, 420, 300] + [lognormal_int(rng, 180, 0.8, 40, 1100)
                                  for _ in range(37)]
        self.wc_templates = [text(n) for n in lens]
        self.wc_template_p = zipf_choice(rng, len(self.wc_templates), 1.2)
        # MMLU: one 5-shot prefix per subject. All begin with the same
        # instruction sentence; only the subject name differs after it.
        self.mmlu_header = text(11)          # "The following are multiple..."
        self.mmlu_prefix = []
        for _ in range(57):
            subj = text(int(rng.integers(1, 5)))
            tail = text(2)                   # "." + newline
            shots = text(lognormal_int(rng, 650, 0.35, 250, 1800))
            self.mmlu_prefix.append(np.concatenate(
                [self.mmlu_header, subj, tail, shots]))
        # subject sizes vary ~ 100 .. 1500 questions in MMLU's test split
        w = rng.lognormal(0.0, 0.7, 57)
        self.mmlu_subject_p = w / w.sum()
        self.mmlu_answer = text(3)           # "\nAnswer:" suffix (not prefix)
        # Azure code / conversation services: a handful of tool system prompts
        self.az_sys = [text(lognormal_int(rng, 70, 0.5, 20, 200))
                       for _ in range(12)]
        self.az_sys_p = zipf_choice(rng, len(self.az_sys), 1.0)
        # OpenVid captions often open with "The video shows / features ..."
        self.ov_openings = [text(2), text(3), text(2)]


# --------------------------------------------------------------------------
# per-kind generators: return (prompt ndarray, output_len, max_tokens)
# --------------------------------------------------------------------------
class Gen:
    def __init__(self, seed: int, shared: Shared, mix_index: int):
        self.rng = np.random.default_rng([seed, 2, mix_index])
        self.text = Text(self.rng)
        self.sh = shared
        self.history = {"wildchat": [], "burstgpt": [], "sharegpt": []}

    # -- building blocks ---------------------------------------------------------
    def _opening(self, prob):
        if self.rng.random() < prob:
            i = self.rng.choice(len(self.sh.openings), p=self.sh.opening_p)
            return self.sh.openings[i]
        return np.empty(0, dtype=np.int32)

    def _chat_prompt(self, median, sigma, hi, p_open):
        op = self._opening(p_open)
        n = lognormal_int(self.rng, median, sigma, 4, hi)
        body = self.text(max(1, n - len(op)))
        return np.concatenate([op, body])

    def _repeat(self, kind, prob):
        h = self.history[kind]
        if h and self.rng.random() < prob:
            return h[int(self.rng.integers(len(h)))]
        return None

    # -- kinds -----------------------------------------------------------
    def burstgpt(self):
        rng = self.rng
        rep = self._repeat("burstgpt", 0.004)      # user re-sends a prompt
        prompt = rep if rep is not None else self._chat_prompt(150, 0.95, 8192, 0.40)
        self.history["burstgpt"].append(prompt)
        m = choose_cap(rng, [256, 512, 1024, 2048, 4096],
                       [0.15, 0.25, 0.3, 0.2, 0.1])
        d = lognormal_int(rng, 15, 1.1, 1, 100000)
        return prompt, min(d, m), m

    def sharegpt(self):
        rng = self.rng
        prompt = self._chat_prompt(175, 1.0, 6000, 0.75)
        self.history["sharegpt"].append(prompt)
        m = choose_cap(rng, [1024, 2048, 4096], [0.35, 0.4, 0.25])
        d = lognormal_int(rng, 210, 0.85, 1, 100000)
        return prompt, min(d, m), m

    def wildchat(self):
        rng = self.rng
        h = self.history["wildchat"]
        u = rng.random()
        if h and u < 0.012:
            prompt = h[int(rng.integers(len(h)))]      # "regenerate" = exact repeat
        elif h and u < 0.07:
            # next turn of an earlier conversation: history + reply + new msg
            parent = h[int(rng.integers(len(h)))]
            reply = self.text(lognormal_int(rng, 220, 0.8, 5, 1500))
            msg = self.text(lognormal_int(rng, 35, 1.0, 2, 1500))
            prompt = np.concatenate([parent, reply, msg])
            if len(prompt) > 12000:
                prompt = prompt[:12000]
        elif u < 0.215:
            i = rng.choice(len(self.sh.wc_templates), p=self.sh.wc_template_p)
            body = self.text(lognormal_int(rng, 60, 1.0, 1, 3000))
            prompt = np.concatenate([self.sh.wc_templates[i], body])
        else:
            prompt = self._chat_prompt(275, 1.05, 10000, 0.45)
        h.append(prompt)
        m = choose_cap(rng, [1024, 2048, 4096, 8192], [0.25, 0.35, 0.3, 0.1])
        d = lognormal_int(rng, 380, 0.8, 1, 100000)
        return prompt, min(d, m), m

    def mmlu(self, subject=None):
        rng, sh = self.rng, self.sh
        if subject is None:
            subject = int(rng.choice(57, p=sh.mmlu_subject_p))
        q = self.text(lognormal_int(rng, 95, 0.55, 15, 900))
        prompt = np.concatenate([sh.mmlu_prefix[subject], q, sh.mmlu_answer])
        m = choose_cap(rng, [1, 2, 4, 8, 16, 32],
                       [0.08, 0.12, 0.2, 0.22, 0.23, 0.15])
        u = rng.random()
        d = 1 if u < 0.35 else 2 if u < 0.80 else 3 if u < 0.90 else int(rng.integers(4, 12))
        return prompt, min(d, m), m

    def openvid(self):
        rng, sh = self.rng, self.sh
        n = lognormal_int(rng, 110, 0.45, 12, 600)
        op = (sh.ov_openings[int(rng.integers(3))] if rng.random() < 0.15
              else np.empty(0, dtype=np.int32))
        prompt = np.concatenate([op, self.text(max(1, n - len(op)))])
        m = 20000
        u = rng.random()
        if u < 0.86:      # full-length clips: tokens ~ frames x tokens/frame
            d = lognormal_int(rng, 17500, 0.13, 4000, 10**6)
        else:             # short clips
            d = int(np.exp(rng.uniform(np.log(1500), np.log(14000))))
        return prompt, min(d, m), m

    def azure(self):
        rng, sh = self.rng, self.sh
        sysp = (sh.az_sys[int(rng.choice(len(sh.az_sys), p=sh.az_sys_p))]
                if rng.random() < 0.30 else np.empty(0, dtype=np.int32))
        n = lognormal_int(rng, 1750, 0.85, 8, 14000)
        prompt = np.concatenate([sysp, self.text(max(1, n - len(sysp)))])
        m = choose_cap(rng, [128, 256, 512, 1024, 2048],
                       [0.1, 0.25, 0.3, 0.2, 0.15])
        d = lognormal_int(rng, 13, 1.0, 1, 100000)
        return prompt, min(d, m), m


# --------------------------------------------------------------------------
# ordering
# --------------------------------------------------------------------------
def kind_counts(props, n):
    raw = {k: props.get(k, 0.0) * n for k in KINDS}
    cnt = {k: int(np.floor(v)) for k, v in raw.items()}
    rest = n - sum(cnt.values())
    for k in sorted(KINDS, key=lambda k: raw[k] - cnt[k], reverse=True)[:rest]:
        cnt[k] += 1
    return cnt


def make_order(rng, cnt, scheme, shared):
    """Return a list of (kind, mmlu_subject_or_None) in file order."""
    if scheme == "uniform":
        seq = [(k, None) for k in KINDS for _ in range(cnt[k])]
        perm = rng.permutation(len(seq))
        return [seq[i] for i in perm]
    if scheme == "bursty":
        # eval jobs submit a subject's questions in runs; Azure code requests
        # come in runs (one IDE session); chat arrives as short runs.
        chunks = []
        for k in KINDS:
            left = cnt[k]
            while left > 0:
                if k == "mmlu":
                    r = int(rng.integers(10, 200))
                    subj = int(rng.choice(57, p=shared.mmlu_subject_p))
                elif k == "azure":
                    r, subj = int(rng.integers(1, 30)), None
                elif k == "openvid":
                    r, subj = int(rng.integers(1, 20)), None
                else:
                    r, subj = int(rng.integers(1, 6)), None
                r = min(r, left)
                chunks.append([(k, subj)] * r)
                left -= r
        perm = rng.permutation(len(chunks))
        return [x for i in perm for x in chunks[i]]
    if scheme == "drift":
        # arrival positions drawn per kind: long-generation jobs submitted
        # early, eval jobs late, chat spread evenly; MMLU keeps subject runs.
        beta = {"openvid": (1.5, 4.0), "mmlu": (4.0, 1.5), "azure": (2.0, 2.0)}
        items, keys = [], []
        for k in KINDS:
            a, b = beta.get(k, (1.0, 1.0))
            if k == "mmlu":
                left = cnt[k]
                while left > 0:
                    r = min(left, int(rng.integers(5, 120)))
                    subj = int(rng.choice(57, p=shared.mmlu_subject_p))
                    t0 = rng.beta(a, b)
                    for j in range(r):
                        items.append((k, subj))
                        keys.append(t0 + j * 1e-7)
                    left -= r
            else:
                t = rng.beta(a, b, cnt[k])
                items += [(k, None)] * cnt[k]
                keys += list(t)
        order = np.argsort(np.asarray(keys), kind="stable")
        return [items[i] for i in order]
    raise ValueError(scheme)


# --------------------------------------------------------------------------
# sharing statistics (computed here, not by the team's tools)
# --------------------------------------------------------------------------
def shared_prefix_tokens(prompts):
    """Sum over requests of the longest prefix it shares with an EARLIER
    request (any order gives the same total: total tokens - distinct trie
    nodes). Computed by lexicographic sort + adjacent LCP."""
    if not prompts:
        return 0
    keys = [p.astype(">u4").tobytes() for p in prompts]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    shared = 0
    prev = None
    for i in order:
        cur = prompts[i]
        if prev is not None:
            m = min(len(prev), len(cur))
            if m:
                neq = np.nonzero(prev[:m] != cur[:m])[0]
                shared += int(neq[0]) if len(neq) else m
        prev = cur
    return shared


# --------------------------------------------------------------------------
def build_mix(name, idx, seed, n, shared):
    rng = np.random.default_rng([seed, 3, idx])
    cnt = kind_counts(MIXES[name], n)
    order = make_order(rng, cnt, ORDERING[name], shared)
    gen = Gen(seed, shared, idx)
    reqs = []
    for kind, subj in order:
        if kind == "mmlu":
            p, d, m = gen.mmlu(subj)
        else:
            p, d, m = getattr(gen, kind)()
        assert 0 < d <= m, (kind, d, m)
        reqs.append((kind, p, int(d), int(m)))
    return reqs


def summarize(name, reqs, path=None):
    lines = [f"== {name}: {len(reqs)} requests"
             + (f", {os.path.getsize(path)/1e6:.1f} MB" if path else "")]
    total_p = sum(len(p) for _, p, _, _ in reqs)
    total_d = sum(d for _, _, d, _ in reqs)
    sh = shared_prefix_tokens([p for _, p, _, _ in reqs])
    lines.append(f"   {'kind':9s} {'count':>6s} {'share':>6s} {'mean_p':>7s} "
                 f"{'mean_d':>8s} {'sharing*':>8s} {'%prompt':>7s} {'%output':>7s}")
    for k in KINDS:
        ps = [p for kk, p, _, _ in reqs if kk == k]
        if not ps:
            continue
        ds = [d for kk, _, d, _ in reqs if kk == k]
        tp, td = sum(len(p) for p in ps), sum(ds)
        ks = shared_prefix_tokens(ps) / tp
        lines.append(f"   {k:9s} {len(ps):6d} {len(ps)/len(reqs):6.3f} "
                     f"{tp/len(ps):7.1f} {td/len(ps):8.1f} {ks:8.3f} "
                     f"{tp/total_p:7.3f} {td/total_d:7.3f}")
    lines.append(f"   total: mean prompt {total_p/len(reqs):.1f}, mean output "
                 f"{total_d/len(reqs):.1f}, prompt tokens {total_p:,}, output "
                 f"tokens {total_d:,}, shared-prefix fraction {sh/total_p:.4f}")
    lines.append("   (*sharing per kind: computed among that kind's requests alone)")
    return "\n".join(lines)


def write_jsonl(path, reqs):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for _, p, d, m in reqs:
            f.write('{"input_ids":[' + ",".join(map(str, p.tolist()))
                    + '],"output_len":' + str(d) + ',"max_tokens":'
                    + str(m) + "}\n")
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=2121)
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--out", default="/tmp/blind_mixes")
    ap.add_argument("--only", default="mixA,mixB,mixC")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    shared = Shared(a.seed)
    for idx, name in enumerate(["mixA", "mixB", "mixC"]):
        if name not in a.only.split(","):
            continue
        t0 = time.time()
        reqs = build_mix(name, idx, a.seed, a.requests, shared)
        path = None
        if not a.no_write:
            path = os.path.join(a.out, f"{name}.jsonl")
            write_jsonl(path, reqs)
        print(summarize(name, reqs, path))
        print(f"   ordering: {ORDERING[name]}, seed {a.seed}, "
              f"{time.time()-t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
