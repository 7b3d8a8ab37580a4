"""The API's limits against a hostile caller, a model of their own with the BLENDSERVE_LIMIT_ prefix, nested in
Settings: what a request's head may weigh before anyone reads it, and each tenant's share of interactive work.

Apart from blendserve/core/config.py so the doors' numbers read on one screen (blendserve/api/doors.py and
blendserve/api/interactive_caps.py use them; docs/design.md §12.3 and §12.4 say why these defaults).
"""
from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class LimitSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BLENDSERVE_LIMIT_", extra="ignore", env_ignore_empty=True)

    # A request's head (request line and headers), checked as its bytes arrive, before the key is known.
    header_bytes: int = Field(64 * 1024, ge=1024)       # beyond it: 431 and the connection closed
    header_count: int = Field(100, ge=8)                # header lines at most: 431 beyond
    header_timeout_s: float = Field(10.0, gt=0)         # a head not complete by then: the connection closed
    # Interactive work (/v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings), per tenant.
    interactive_per_tenant: int = Field(32, ge=0)       # requests in flight per tenant and API process; 0: none
    pool_size: int = Field(128, ge=1)                   # the API's connections to the workers, all tenants
    output_tokens: int = Field(131072, ge=1)            # n * max_tokens of one request
    logprob_entries: int = Field(262144, ge=1)          # top_logprobs * n * max_tokens of one request

    @model_validator(mode="after")
    def _share_below_pool(self) -> LimitSettings:
        """One tenant's requests in flight can never hold every connection to the workers."""
        if self.interactive_per_tenant >= self.pool_size:
            raise ValueError(f"BLENDSERVE_LIMIT_INTERACTIVE_PER_TENANT ({self.interactive_per_tenant}) must be "
                             f"below BLENDSERVE_LIMIT_POOL_SIZE ({self.pool_size})")
        return self
