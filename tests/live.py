"""A real BlendServe deployment for tests: each role a real process, a real database, a real port.

The deployment itself lives in tests/harness/deployment.py, which the benchmarks start too.
"""
from tests.harness.deployment import (  # noqa: F401
    PG_ADMIN,
    READY,
    ROLES,
    TERMINAL,
    Deployment,
    chat_lines,
    free_port,
    jsonl,
    pg_schema_url,
    read_lines,
    run_batch,
    wait_batch,
)
