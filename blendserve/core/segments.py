"""Token ids of rendered chat prompts, the segments they repeat encoded once.

A chat template puts every message between added tokens (ChatML's
`<|im_start|>system\\n...<|im_end|>`), and a fast tokenizer splits its input at
added tokens before anything else: the text between two of them is
normalized, pre-tokenized and merged on its own. So a prompt's ids are its
segments' ids end to end, and a segment seen before (a batch's shared system
prompt, the template's default one, `assistant\\n`) need not be encoded again.
In the control-plane benchmark (30% of prompts behind one of 50 system
prompts, the rest behind the template's default one) the system segments were
about two thirds of the scheduler's encoding CPU.

Exact by check, not by assumption: a tokenizer whose splits are not
independent (SentencePiece's Metaspace prepends its space to the first split
only) would give other ids, so the first texts of an encoder, and every
cached segment the first time it is reused, are checked against encoding the
whole text; one mismatch turns the cache off for good. Tokenizers with added
tokens that strip or match whole words, or match after normalization, never
use it.
"""
from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from typing import Any

log = logging.getLogger("blendserve.tokens")

MAX_SEGMENTS = 8192     # cached segments (least recently used evicted): a batch's distinct system prompts
CHECK_FIRST = 32        # texts checked whole at the start, before any reuse is trusted


class SegmentEncoder:
    """`encode(texts)` as the backend's `encode_batch(texts, add_special_tokens=False)`, segment-cached.

    `backend` is a `tokenizers.Tokenizer` of this encoder's own (no truncation,
    no padding); it is never changed here, so threads may share the encoder.
    """

    def __init__(self, backend: Any, max_segments: int = MAX_SEGMENTS) -> None:
        self.backend, self.max_segments = backend, max_segments
        added = backend.get_added_tokens_decoder()
        self.ids = {t.content: i for i, t in added.items()}
        plain = all(not (t.lstrip or t.rstrip or t.single_word or (t.normalized and backend.normalizer is not None))
                    for t in added.values())
        self.on = plain and bool(self.ids)
        # Longest first: at one position the longest added token wins, as in the tokenizer's own split.
        self.split = re.compile("(" + "|".join(map(re.escape, sorted(self.ids, key=len, reverse=True))) + ")") \
            if self.ids else None
        self.cache: OrderedDict[str, list[int]] = OrderedDict()
        self.checked: set[str] = set()     # cached segments whose reuse matched a whole encoding once
        self.to_check = CHECK_FIRST
        self.lock = threading.Lock()

    def _whole(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=False)]

    def encode(self, texts: list[str]) -> list[list[int]]:
        if not self.on or not texts:
            return self._whole(texts)
        parts = [self.split.split(t) for t in texts]     # text, added token, text, ...; texts may be ''
        with self.lock:
            known = {p: self.cache[p] for ps in parts for p in ps[::2] if p in self.cache}
        todo = list({p for ps in parts for p in ps[::2] if p and p not in known})
        fresh = dict(zip(todo, self._whole(todo))) if todo else {}
        out, suspect, first = [], [], set()
        for k, ps in enumerate(parts):
            ids: list[int] = []
            for j, p in enumerate(ps):
                if j % 2:
                    ids.append(self.ids[p])
                elif p:
                    ids += known[p] if p in known else fresh[p]
            out.append(ids)
            unchecked = {p for p in ps[::2] if p in known and p not in self.checked} - first
            if unchecked:           # one whole encoding per cached segment's first reuse
                suspect.append(k)
                first |= unchecked
        with self.lock:
            check = suspect + list(range(min(self.to_check, len(texts))))
            self.to_check = max(0, self.to_check - len(texts))
            for p, ids in fresh.items():
                self.cache[p] = ids
            for p in known:
                if p in self.cache:
                    self.cache.move_to_end(p)
            while len(self.cache) > self.max_segments:
                self.checked.discard(self.cache.popitem(last=False)[0])
        if check:
            check = sorted(set(check))
            whole = self._whole([texts[k] for k in check])
            if any(out[k] != w for k, w in zip(check, whole)):
                log.warning("segment-wise token ids differ from whole-text ones for this tokenizer; "
                            "encoding whole texts from now on")
                self.on = False
                return self._whole(texts)
            with self.lock:
                self.checked.update(p for k in check for p in parts[k][::2] if p in self.cache)
        return out
