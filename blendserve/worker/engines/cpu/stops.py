"""Stop strings, checked as each token arrives without decoding the whole output again.

The output is detokenized incrementally (the prefix/read offset scheme of
vLLM's and TGI's detokenizers): each new token decodes together with a few
tokens before it, for context, and the text it adds is the difference. Text
that ends in an incomplete UTF-8 character (a byte-level token split a
character) is held back until the character completes. Only the tail of the
text that the new piece could have completed is searched.
"""
from __future__ import annotations

CONTEXT = 5   # tokens decoded before the new ones, so that merges and leading spaces come out right


class StopChecker:
    def __init__(self, tokenizer, stops: tuple[str, ...]) -> None:
        self.tokenizer = tokenizer
        self.stops = tuple(s for s in stops if s)
        self.longest = max((len(s) for s in self.stops), default=0)
        self.ids: list[int] = []
        self.text = ""
        self._prefix = 0   # ids[_prefix:_read] decode to the context already in ``text``
        self._read = 0

    def add(self, token: int) -> str | None:
        """Feed one output token; the text before the first stop string if one now appears, else None."""
        self.ids.append(token)
        decode = self.tokenizer.decode
        before = decode(self.ids[self._prefix:self._read], skip_special_tokens=True)
        now = decode(self.ids[self._prefix:], skip_special_tokens=True)
        if len(now) <= len(before) or now.endswith("\ufffd"):
            return None
        searched_from = max(0, len(self.text) - self.longest + 1)
        self.text += now[len(before):]
        self._prefix, self._read = max(0, len(self.ids) - CONTEXT), len(self.ids)
        cuts = [i for i in (self.text.find(s, searched_from) for s in self.stops) if i >= 0]
        return self.text[: min(cuts)] if cuts else None
