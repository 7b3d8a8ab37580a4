"""Where batch events are sent and how deliveries retry: BLENDSERVE_WEBHOOK_*, nested in Settings.

A deployment endpoint (`url` + `secret`) receives every batch's events; a tenant named in
BLENDSERVE_API_KEYS (`tenant:key` entries, blendserve/core/owners.py) may have an endpoint of its own
(`tenant_urls` + `tenant_secrets`), which receives its batches' events alone. Each endpoint has its own
`whsec_` secret, so no tenant can sign for another's receiver. Bad entries fail at start, named by the
tenant or the setting, never by the secret.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from standardwebhooks import Webhook

from blendserve.core.owners import PREFIX, TENANT

DEPLOYMENT = ""         # the target key of the deployment endpoint; a tenant's endpoint is keyed by its owner


def _mapping(value: object, name: str) -> object:
    """"acme=https://...,beta=https://..." -> {"acme": "https://...", ...}; the value may hold '=' (base64)."""
    if not isinstance(value, str):
        return value
    out: dict[str, str] = {}
    for i, item in enumerate((x.strip() for x in value.split(",") if x.strip()), start=1):
        tenant, sep, rest = item.partition("=")
        if not sep or not TENANT.fullmatch(tenant.strip()) or not rest.strip():
            raise ValueError(f"{name}: entry {i} is not tenant=value")
        out[tenant.strip()] = rest.strip()
    return out


def _check_secret(secret: str, where: str) -> None:
    if not secret.startswith("whsec_"):
        raise ValueError(f"{where}: a webhook secret starts with whsec_")
    try:
        Webhook(secret)
    except Exception:
        raise ValueError(f"{where}: the secret after whsec_ is not base64") from None


class WebhookSettings(BaseSettings):
    """Signed batch events (`batch.completed`, `batch.failed`, `batch.expired`, `batch.cancelled`) as OpenAI
    sends them, per the Standard Webhooks spec; delivered by the leading scheduler, at least once."""
    model_config = SettingsConfigDict(env_prefix="BLENDSERVE_WEBHOOK_", extra="ignore", hide_input_in_errors=True)

    url: str = ""                             # the deployment endpoint: every batch's events; "": none
    secret: str = ""                          # its whsec_ secret
    tenant_urls: Annotated[dict[str, str], NoDecode] = {}      # "tenant=url,...": a tenant's own endpoint
    tenant_secrets: Annotated[dict[str, str], NoDecode] = {}   # "tenant=whsec_...,...": its secret
    timeout_s: float = Field(5.0, gt=0)       # one delivery's connect + answer
    concurrency: int = Field(4, gt=0)         # deliveries in flight at once
    retry_first_s: float = Field(5.0, gt=0)   # the wait after a first failed attempt, doubling after each
    retry_max_s: float = Field(60.0, gt=0)    # the longest wait: a receiver back up gets its events this soon
    retry_for_s: float = Field(72 * 3600, gt=0)   # after this long an event is given up on (OpenAI: 72 h)

    @field_validator("tenant_urls", "tenant_secrets", mode="before")
    @classmethod
    def _tenant_map(cls, v: object, info) -> object:
        return _mapping(v, f"BLENDSERVE_WEBHOOK_{info.field_name.upper()}")

    @model_validator(mode="after")
    def _secrets(self) -> WebhookSettings:
        if self.url:
            _check_secret(self.secret, "BLENDSERVE_WEBHOOK_SECRET")
        for tenant in self.tenant_urls:
            _check_secret(self.tenant_secrets.get(tenant, ""), f"BLENDSERVE_WEBHOOK_TENANT_SECRETS ({tenant})")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.url or self.tenant_urls)

    def targets(self, owner: str) -> list[str]:
        """The endpoints a batch of this owner notifies: the deployment's, and its tenant's own."""
        out = [DEPLOYMENT] if self.url else []
        if owner.startswith(PREFIX) and owner[len(PREFIX):] in self.tenant_urls:
            out.append(owner)
        return out

    def endpoint(self, target: str) -> tuple[str, str] | None:
        """(url, secret) of a target key; None once it is no longer configured."""
        if target == DEPLOYMENT:
            return (self.url, self.secret) if self.url else None
        tenant = target[len(PREFIX):]
        return (self.tenant_urls[tenant], self.tenant_secrets[tenant]) if tenant in self.tenant_urls else None
