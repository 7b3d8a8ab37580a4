"""Who owns a file or a batch: a digest of the API key, never the key itself (shared by every role)."""
from __future__ import annotations

import hashlib


def owner_of_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]
