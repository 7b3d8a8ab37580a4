"""What the deployment needs past the system: the installed engine, the model, the GPU's memory, the database
and the engine server."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from blendserve.doctor.probes import FAIL, MIN_PYTHON, OK, SKIP, WARN, Check, Probes, Target


def engine_import(t: Target, p: Probes) -> Check:
    """The engine's own packages load, sgl_kernel's CUDA ops included (they need libcuda.so.1: a driver)."""
    mod = {"sglang": "import sglang, sgl_kernel", "vllm": "import vllm"}[t.engine]
    code, out = p.run([t.python, "-c", mod])
    if code == 0:
        return Check(f"{t.engine} loads", OK, mod)
    last = out.strip().splitlines()[-1] if out.strip() else f"exit {code}"
    fix = (f"pip install '.[{t.engine}]' with Python {'.'.join(map(str, MIN_PYTHON[t.engine]))}+"
           if "No module named" in out else "see the error; a missing libcuda.so.1 means no driver is mounted")
    return Check(f"{t.engine} loads", FAIL, last[:300], fix)


def model_dir(t: Target) -> tuple[str, Path | None]:
    """(name, checkpoint dir) the worker would load; dir None for the default model not yet converted."""
    from blendserve.core.config import SMOLLM2

    configured = t.settings.models if t.settings else {}
    if t.model:
        return t.model, configured.get(t.model, Path(t.model))
    if configured:
        name = next(iter(configured))
        return name, configured[name]
    if t.settings is None:
        return SMOLLM2, None
    from blendserve.core.modelstore import smollm2_gguf_path

    path = t.settings.models_dir / smollm2_gguf_path().stem
    return SMOLLM2, path if (path / "config.json").is_file() else None


def model(t: Target) -> Check:
    try:
        name, path = model_dir(t)
    except Exception as e:            # noqa: BLE001 - no default model's package is this check's failure
        return Check("model", FAIL, str(e)[:300], "BLENDSERVE_MODELS=name=/path/to/checkpoint,...")
    if path is None:
        return Check("model", OK, f"{name}: converted from its package at the worker's first start")
    fix = "point --model or BLENDSERVE_MODELS at a Hugging Face checkpoint directory (config.json, weights, tokenizer)"
    if not (path / "config.json").is_file():
        return Check("model", FAIL, f"{name}: {path} has no config.json", fix)
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return Check("model", FAIL, f"{name}: {path} has no tokenizer (tokenizer.json / tokenizer.model)", fix)
    try:
        from blendserve.core.modelstore import load_tokenizer

        load_tokenizer(path)
    except Exception as e:            # noqa: BLE001 - any failure to load is the finding
        return Check("model", FAIL, f"{name}: its tokenizer does not load: {e}"[:300], fix)
    return Check("model", OK, f"{name}: {path}, tokenizer loads")


def weights_bytes(path: Path) -> int:
    return sum(f.stat().st_size for pattern in ("*.safetensors", "*.bin", "*.pt", "*.gguf") for f in path.glob(pattern))


def gpu_memory(t: Target, found: list[dict[str, str]] | None) -> Check:
    """The weights (split over tp GPUs) and a KV pool must fit in what SGLang/vLLM may take of one GPU."""
    if not found:
        return Check("GPU memory", SKIP, "no GPU found")
    try:
        _, path = model_dir(t)
    except Exception:                 # noqa: BLE001 - the model check reports it
        path = None
    if path is None or not path.is_dir():
        return Check("GPU memory", SKIP, "no checkpoint to size")
    configured = t.settings.sglang.mem_fraction_static if t.settings else None
    fraction = configured or 0.85 if t.engine == "sglang" else 0.9
    free = min(int(g["free_mib"]) for g in found) * 2**20
    usable = fraction * min(int(g["total_mib"]) for g in found) * 2**20
    weights = weights_bytes(path) / max(1, t.tp)
    kv_floor = 2 * 2**30          # room for a KV pool worth running: a couple of GiB at least
    found_s = f"weights {weights / 2**30:.1f} GiB per GPU; {fraction:.2f} of {usable / fraction / 2**30:.0f} GiB " \
              f"usable, {free / 2**30:.0f} GiB free"
    if weights + kv_floor > min(usable, free):
        return Check("GPU memory", FAIL, found_s, "a GPU with more memory, --tp N over more GPUs, a smaller (or "
                     "quantized) model, or free the GPU of other processes")
    return Check("GPU memory", OK, f"{found_s}; KV pool ~{(min(usable, free) - weights) / 2**30:.0f} GiB")


def database(t: Target) -> Check:
    settings = t.settings
    if settings is None:
        return Check("database", SKIP, "no settings to find it by")
    try:
        import sqlalchemy as sa

        if not settings.database_url:
            settings.data_dir.mkdir(parents=True, exist_ok=True)     # every role creates it at start too
        engine = sa.create_engine(settings.db_url)
        with engine.connect() as c:
            c.execute(sa.text("SELECT 1"))
        engine.dispose()
    except Exception as e:            # noqa: BLE001 - any failure to connect is the finding
        return Check("database", FAIL, str(e).splitlines()[0][:300],
                     "check BLENDSERVE_DATABASE_URL (host, credentials) and that the database is up")
    return Check("database", OK, engine.url.render_as_string(hide_password=True))


def server(t: Target) -> Check:
    """The engine server answers, and what it says of its running cap, KV pool and priorities."""
    import asyncio

    import httpx

    from blendserve.worker.engines.server.discovery import discover
    from blendserve.worker.engines.server.engine import base_url

    if not t.url:
        return Check("engine server", FAIL, "no server URL", "--url http://server:port or BLENDSERVE_SERVER_URL")

    async def ask():
        async with httpx.AsyncClient(base_url=base_url(t.url), timeout=10.0) as client:
            return await discover(client, "", t.model)

    try:
        info = asyncio.run(ask())
    except Exception as e:            # noqa: BLE001 - unreachable, refused, no such model: the finding
        return Check("engine server", FAIL, f"{t.url}: {type(e).__name__}: {e}"[:300],
                     "start the server (docs/engine-servers.md) or fix --url")
    found = (f"{info.kind} at {t.url}: {info.model}, running cap {info.running_cap or 'unpublished'}, "
             f"KV {info.kv_tokens or 'unpublished'} tokens, priorities {'on' if info.priorities else 'off'}")
    if info.kind == "sglang" and not info.priorities:
        return Check("engine server", WARN, found, "start sglang.launch_server with --enable-priority-scheduling "
                     "so interactive requests go ahead of queued batch work")
    if info.kind == "vllm" and not info.running_cap:
        return Check("engine server", WARN, found, "VLLM_SERVER_DEV_MODE=1 publishes vLLM's max_num_seqs "
                     "(/server_info); without it the worker's window is bounded by the KV capacity")
    return Check("engine server", OK, found)
