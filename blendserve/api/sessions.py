"""Dashboard sessions: a signed, expiring cookie that names the tenant and the key's fingerprint, never the key.

A browser cannot send an Authorization header from the address bar, so the
dashboard's login form POSTs a key once and gets this cookie back. The cookie
is `payload.signature` (HMAC-SHA256 with BLENDSERVE_SESSION_SECRET); it ends
at its expiry or as soon as the key it was made with leaves BLENDSERVE_API_KEYS.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time

from blendserve.core.owners import Keyring

COOKIE = "blendserve_session"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Sessions:
    def __init__(self, secret: str, ttl_s: int) -> None:
        # A random secret per process when none is set: sessions end with the process and are not shared by
        # replicas, which is safe, and an operator with several API replicas sets one secret for all.
        self.key = hashlib.sha256(b"blendserve-session:" + (secret or secrets.token_hex(32)).encode()).digest()
        self.ttl_s = ttl_s

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self.key, payload.encode(), hashlib.sha256).digest())

    def issue(self, owner: str, kid: str, now: float | None = None) -> str:
        payload = _b64(json.dumps({"o": owner, "k": kid, "e": int((now or time.time()) + self.ttl_s)}).encode())
        return f"{payload}.{self._sign(payload)}"

    def owner(self, cookie: str, keyring: Keyring, now: float | None = None) -> str | None:
        """The tenant a cookie speaks for, if it is ours, unexpired, and its key is still configured."""
        payload, _, sig = cookie.partition(".")
        if not payload or not sig or len(cookie) > 1024 or not hmac.compare_digest(self._sign(payload), sig):
            return None
        try:
            data = json.loads(_unb64(payload))
            owner, kid, exp = str(data["o"]), str(data["k"]), float(data["e"])
        except (ValueError, KeyError, TypeError):
            return None
        if exp < (now or time.time()) or keyring.owner_of_key_id(kid) != owner:
            return None
        return owner
