"""Token ids to what OpenAI's logprobs show: each token's text and its UTF-8 bytes.

A byte-level BPE token (GPT-2, Llama 3, SmolLM2) may hold part of a character,
so its own text is not always valid UTF-8: OpenAI then shows the token as
``bytes:\\xe2\\x80`` and its ``bytes`` say which bytes it holds; the bytes of
consecutive tokens concatenate to the output's UTF-8. Shared by every engine:
each hands over token ids and log-probabilities, this names them.
"""
from __future__ import annotations

from functools import lru_cache

from blendserve.worker.engines.base import TokenLogprob


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-ins for the 256 byte values, inverted (the byte-level BPE alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}


class TokenNames:
    """Each token id's (text, bytes) for one tokenizer, computed on first use."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.special = {int(i) for i in getattr(tokenizer, "all_special_ids", [])}
        self.cache: dict[int, tuple[str, list[int]]] = {}

    def name(self, token: int) -> tuple[str, list[int]]:
        got = self.cache.get(token)
        if got is None:
            got = self.cache[token] = self._name(token)
        return got

    def _name(self, token: int) -> tuple[str, list[int]]:
        piece = self.tokenizer.convert_ids_to_tokens(token)
        decoder = _byte_decoder()
        if token in self.special or piece is None:
            raw = (piece or "").encode()
        elif all(c in decoder for c in piece):
            raw = bytes(decoder[c] for c in piece)
        elif piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:   # SentencePiece byte fallback
            raw = bytes([int(piece[3:5], 16)])
        else:
            raw = piece.replace("\u2581", " ").encode()                             # SentencePiece's word marker
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            text = "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
        return text, list(raw)

    def entry(self, token: int, logprob: float, top: list[tuple[int, float]] = ()) -> TokenLogprob:
        text, raw = self.name(token)
        return TokenLogprob(text, raw, logprob, tuple(self.entry(t, lp) for t, lp in top))
