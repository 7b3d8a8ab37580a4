"""What a running server says about itself: the model's name there, its kind, its KV capacity and running cap.

The worker sizes its window of requests in flight from these (blendserve/worker/engines/server/engine.py), and the
planner prices rounds on the capacity, so each figure is read where the server publishes it:

- vLLM: ``/metrics`` carries ``vllm:cache_config_info``, an info gauge whose labels hold ``num_gpu_blocks``
  and ``block_size`` (one line per data-parallel engine; their product, summed, is the capacity).
  ``/v1/models`` lists the served names (``owned_by: vllm``). The running cap (``max_num_seqs``, which vLLM
  0.32 sizes from the device: 1024 on GPUs of 70 GB or more, 256 on smaller ones, 128 per CPU rank) is
  published only by ``/server_info?config_format=json``, a route vLLM serves with
  ``VLLM_SERVER_DEV_MODE=1``: ``vllm_config.scheduler_config.max_num_seqs`` times the data-parallel size.
  Without it the cap is unknown (engine.py then bounds the window by the KV capacity alone); with
  ``--disable-log-stats`` no cache figures either.
- SGLang's ``launch_server``: ``/server_info`` (``/get_server_info`` on older servers) holds
  ``max_total_num_tokens``, ``chunked_prefill_size`` and whether streams are incremental. Its
  ``max_running_requests`` is the launch argument (None unless ``--max-running-requests`` was given); the
  cap the scheduler runs with (SGLang's default: bounded by the KV pool, often thousands) is each
  data-parallel rank's ``internal_states[i]["effective_max_running_requests_per_dp"]``, summed.
  ``enable_priority_scheduling`` says whether a request's ``priority`` orders its queue.
- SGLang's router answers ``/get_server_info`` with its own state (``workers_count``) and lists its servers
  at ``/workers``: each healthy one is asked for its figures, the capacities and caps summed (the router
  spreads requests over them all). A router none of whose servers answers the worker directly (another
  network) is an SGLang endpoint of unknown figures; one with no healthy server is not serving yet.

Anything else that speaks ``/v1/completions`` is an ``openai`` server: nothing is known but its models.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

import httpx

from blendserve.worker.engines.sglang_args import positive, sglang_running_cap

CACHE_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class ServerInfo:
    model: str                                  # the name to send in each request's "model"
    kind: Literal["vllm", "sglang", "openai"]
    kv_tokens: int | None = None                # KV cache capacity in tokens; None: not published
    running_cap: int | None = None              # requests the server runs at once; None: not published
    step_tokens: int | None = None              # tokens one step carries (SGLang's chunked_prefill_size)
    incremental: bool = False                   # SGLang streams only what is new in each chunk
    priorities: bool = False                    # the server orders its queue by each request's priority


class NotServing(ValueError):
    """The endpoint answers but has nothing to serve with yet (a router with no healthy server)."""


class NoModel(ValueError):
    """The server does not serve the model the worker is for: a deployment error, not an outage."""


def vllm_kv_tokens(metrics: str) -> int | None:
    """num_gpu_blocks x block_size from vLLM's cache_config_info, summed over its engines; None if absent."""
    total = 0
    for m in CACHE_INFO.finditer(metrics):
        labels = dict(LABEL.findall(m.group("labels")))
        try:
            total += int(labels["num_gpu_blocks"]) * int(labels["block_size"])
        except (KeyError, ValueError):
            continue
    return total or None


def pick_model(served: list[str], configured: str, worker_model: str) -> str:
    """The configured name; else the worker's model if the server serves it under that name; else the
    server's only model."""
    if configured:
        return configured
    if worker_model in served:
        return worker_model
    if len(served) == 1:
        return served[0]
    raise NoModel(f"the server serves {served}, not {worker_model!r}; set BLENDSERVE_SERVER_MODEL")


async def _json_or_none(client: httpx.AsyncClient, path: str) -> dict | None:
    r = await client.get(path)
    if r.status_code != 200:
        return None
    try:
        body = r.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


async def discover(client: httpx.AsyncClient, configured_model: str, worker_model: str) -> ServerInfo:
    """Ask the server; transport errors propagate (the caller treats them as the server being down)."""
    r = await client.get("/v1/models")
    r.raise_for_status()
    listed = r.json().get("data", [])
    model = pick_model([m["id"] for m in listed], configured_model, worker_model)
    sglang = await _json_or_none(client, "/server_info") or await _json_or_none(client, "/get_server_info")
    if sglang is not None and "workers_count" in sglang:
        return await _router_info(client, model)
    if sglang is not None and ("max_total_num_tokens" in sglang or "internal_states" in sglang):
        return _sglang_info(model, sglang)
    metrics = await client.get("/metrics")
    text = metrics.text if metrics.status_code == 200 else ""
    if "vllm:" in text or any(m.get("owned_by") == "vllm" for m in listed):    # with --disable-log-stats: no figures
        config = await _vllm_config(client)
        return ServerInfo(model, "vllm", kv_tokens=vllm_kv_tokens(text), running_cap=vllm_running_cap(config),
                          step_tokens=positive(config.get("scheduler_config", {}).get("max_num_batched_tokens")),
                          priorities=config.get("scheduler_config", {}).get("policy") == "priority")
    return ServerInfo(model, "openai")


async def _vllm_config(client: httpx.AsyncClient) -> dict:
    """vLLM's resolved config where the server publishes it (VLLM_SERVER_DEV_MODE=1), else {}."""
    try:
        body = await _json_or_none(client, "/server_info?config_format=json")
    except httpx.HTTPError:
        return {}
    config = (body or {}).get("vllm_config")
    return config if isinstance(config, dict) else {}


def vllm_running_cap(config: dict) -> int | None:
    """max_num_seqs of each data-parallel engine, times their number; None where vLLM published no config."""
    per_engine = positive((config.get("scheduler_config") or {}).get("max_num_seqs"))
    if per_engine is None:
        return None
    return per_engine * (positive((config.get("parallel_config") or {}).get("data_parallel_size")) or 1)


def _sglang_info(model: str, info: dict) -> ServerInfo:
    state = (info.get("internal_states") or [{}])[0]
    return ServerInfo(model, "sglang",
                      kv_tokens=positive(info.get("max_total_num_tokens") or state.get("max_total_num_tokens")),
                      running_cap=sglang_running_cap(info),
                      step_tokens=positive(info.get("chunked_prefill_size")),
                      incremental=bool(info.get("incremental_streaming_output")),
                      priorities=bool(info.get("enable_priority_scheduling")
                                      or state.get("enable_priority_scheduling")))


async def _router_info(client: httpx.AsyncClient, model: str) -> ServerInfo:
    """An SGLang router: its healthy servers' figures, asked of each server directly."""
    listed = (await _json_or_none(client, "/workers") or {}).get("workers") or []
    urls = [w["url"] for w in listed if isinstance(w, dict) and w.get("url") and w.get("is_healthy", True)]
    if not urls:
        raise NotServing("the SGLang router has no healthy server yet")
    found = []
    for url in urls:
        try:
            async with httpx.AsyncClient(base_url=url, timeout=5.0) as direct:
                info = await _json_or_none(direct, "/server_info") or await _json_or_none(direct, "/get_server_info")
        except httpx.HTTPError:
            continue
        if info is not None:
            found.append(_sglang_info(model, info))
    if not found:
        return ServerInfo(model, "sglang")

    def total(values: list[int | None]) -> int | None:
        return sum(v for v in values if v) or None

    return ServerInfo(model, "sglang", kv_tokens=total([f.kv_tokens for f in found]),
                      running_cap=total([f.running_cap for f in found]),
                      step_tokens=min((f.step_tokens for f in found if f.step_tokens), default=None),
                      incremental=found[0].incremental, priorities=all(f.priorities for f in found))


def known(new: ServerInfo | None, old: ServerInfo) -> ServerInfo:
    """Figures read again after an outage, the old ones kept where the new reading has none."""
    if new is None:
        return old
    return replace(new, **{f: getattr(old, f) for f in ("kv_tokens", "running_cap", "step_tokens")
                           if getattr(new, f) is None})
