"""Who owns a file or a batch: a tenant, named in BLENDSERVE_API_KEYS, never a key itself (shared by every role).

`BLENDSERVE_API_KEYS` lists `tenant:key` entries (a tenant may hold several keys)
and plain `key` entries (each its own tenant). The owner stored on a row is
`tenant:<name>` for a named tenant and a digest of the key for a plain one, so
rows made before tenants existed keep their owner and a key is never stored.
A key can be rotated (add the new key to the tenant, move clients, remove the
old one) without orphaning anything, because rows name the tenant, not the key.
`adopt` moves rows made with a plain key to the tenant that key is now listed
under (the API runs it at every start, since the key list is configuration).
"""
from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import update
from sqlalchemy.orm import Session

TENANT = re.compile(r"[A-Za-z0-9_.\-]{1,48}")    # a tenant name; an entry's part before ':' must match it
PREFIX = "tenant:"


def owner_of_key(key: str) -> str:
    """The owner of a plain key's rows: a digest, so the database never holds the key."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def key_id(key: str) -> str:
    """A short public fingerprint of a key (sessions name it, so removing the key ends them)."""
    return hashlib.sha256(b"kid:" + key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Keyring:
    """The configured keys: key digest -> (owner, fingerprint). Empty: no authentication (loopback only)."""

    entries: dict[bytes, tuple[str, str]] = field(default_factory=dict)
    named: dict[str, str] = field(default_factory=dict)      # key digest (owner_of_key) -> tenant owner

    @classmethod
    def parse(cls, items: Iterable[str]) -> Keyring:
        """The keyring of BLENDSERVE_API_KEYS' entries (Settings.api_keys)."""
        entries: dict[bytes, tuple[str, str]] = {}
        named: dict[str, str] = {}
        for item in items:
            tenant, sep, key = item.partition(":")
            if sep and TENANT.fullmatch(tenant) and key.strip():
                key = key.strip()
                owner = PREFIX + tenant
                named[owner_of_key(key)] = owner
            else:
                key, owner = item, owner_of_key(item)
            digest = hashlib.sha256(key.encode()).digest()
            if digest in entries and entries[digest][0] != owner:
                raise ValueError("BLENDSERVE_API_KEYS lists one key under two tenants")
            entries[digest] = (owner, key_id(key))
        return cls(entries, named)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def lookup(self, token: str) -> tuple[str, str] | None:
        """(owner, key fingerprint) of a presented key, or None. The digest is compared, not the key, so the
        time taken says nothing about how much of a key matched."""
        digest = hashlib.sha256(token.encode(errors="surrogateescape")).digest()
        for known, value in self.entries.items():
            if hmac.compare_digest(known, digest):
                return value
        return None

    def owner_of(self, key: str) -> str | None:
        found = self.lookup(key)
        return found[0] if found else None

    def owner_of_key_id(self, kid: str) -> str | None:
        """The owner of the key with this fingerprint, while that key is configured."""
        for owner, known in self.entries.values():
            if hmac.compare_digest(known, kid):
                return owner
        return None


def adopt(session: Session, keyring: Keyring) -> int:
    """Move rows owned by a plain key's digest to the tenant that key is now listed under; idempotent."""
    from blendserve.core.models import Batch, File

    moved = 0
    for digest, owner in keyring.named.items():
        for table in (File, Batch):
            moved += session.execute(update(table).where(table.owner == digest).values(owner=owner)).rowcount or 0
    return moved
