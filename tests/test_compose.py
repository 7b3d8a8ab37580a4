"""docker-compose.yml renders for every profile, and N GPU workers get N distinct GPUs.

Rendered by `docker compose config` where the compose CLI plugin is installed; elsewhere the file is
interpolated here (${VAR}, ${VAR:-default}, ${VAR:?error}) and validated against the Compose
Specification's own JSON schema (tests/compose_spec.json, from compose-spec/compose-spec, Apache-2.0),
profiles applied as compose applies them. Either way a typo, a bad key or a missing variable fails.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ENV = {"MODEL_DIR": "/models/Llama-3.1-8B-Instruct", "BLENDSERVE_API_KEYS": "k1", "MODEL_NAME": "llama",
       "BLENDSERVE_WORKER_SECRET": "s1"}
VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def compose_cli() -> bool:
    docker = shutil.which("docker")
    return docker is not None and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0


def interpolate(value, env: dict[str, str]):
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group(1) or m.group(4), m.group(2), m.group(3)
        have = env.get(name)
        if op in (":-", "-"):
            return have if have not in (None, "") or (op == "-" and have is not None) else arg
        if op in (":?", "?") and have in (None, ""):
            raise ValueError(f"required variable {name} is missing a value: {arg}")
        return have or ""

    return VAR.sub(one, value)


def render(profiles: list[str], env: dict[str, str]) -> dict:
    """The file as compose runs it under these profiles: services without a profile, plus those of one."""
    if compose_cli():
        args = ["docker", "compose", "-f", str(ROOT / "docker-compose.yml")]
        for p in profiles:
            args += ["--profile", p]
        out = subprocess.run(args + ["config", "--format", "json"], capture_output=True, text=True,
                             env={**os.environ, **env}, check=True)
        return json.loads(out.stdout)
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())   # YAML anchors and << merges resolved
    doc = interpolate(doc, env)
    schema = json.loads((ROOT / "tests" / "compose_spec.json").read_text())
    jsonschema.validate(doc, schema)
    doc["services"] = {name: s for name, s in doc["services"].items()
                       if not s.get("profiles") or set(s["profiles"]) & set(profiles)}
    return doc


def gpu_workers(doc: dict) -> dict[str, dict]:
    return {name: s for name, s in doc["services"].items() if "--engine" in s.get("command", [])
            and s["command"][s["command"].index("--engine") + 1] == "sglang"}


def devices(service: dict) -> list[str]:
    return [d for r in service["deploy"]["resources"]["reservations"]["devices"] for d in r["device_ids"]]


def env_of(service: dict) -> dict[str, str]:
    e = service["environment"]
    return e if isinstance(e, dict) else dict(x.split("=", 1) for x in e)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_n_gpu_workers_get_n_distinct_gpus(n: int) -> None:
    doc = render([f"gpus-{n}"], ENV)
    workers = gpu_workers(doc)
    assert len(workers) == n
    assigned = [devices(s) for s in workers.values()]
    assert all(len(d) == 1 for d in assigned)
    assert sorted(d[0] for d in assigned) == sorted(str(i) for i in range(n))
    for name, s in workers.items():
        env = env_of(s)
        assert env["BLENDSERVE_WORKER_ADVERTISE_HOST"] == name        # the API dials the service by name
        assert env["BLENDSERVE_WORKER_HOST"] == "0.0.0.0" and env["BLENDSERVE_WORKER_PORT"] == "8100"
        assert env["BLENDSERVE_MODELS"] == "llama=/models/model"
        assert s["build"]["dockerfile"] == "Dockerfile.sglang" and s["shm_size"] in ("32gb", 34359738368)
    assert {"postgres", "api", "scheduler"} <= set(doc["services"])


def test_no_profile_starts_the_control_plane_only() -> None:
    doc = render([], ENV)
    assert set(doc["services"]) == {"postgres", "api", "scheduler"}


def test_servers_profile_puts_a_slim_worker_in_front_of_an_engine_server() -> None:
    doc = render(["servers"], {**ENV, "ENGINE_URL": "http://10.0.0.5:30000"})
    assert not gpu_workers(doc)
    w = doc["services"]["server-worker"]
    assert w["command"][:4] == ["worker", "--engine", "openai", "--url"]
    assert w["command"][4] == "http://10.0.0.5:30000"
    assert "dockerfile" not in (w.get("build") or {}) or w["build"]["dockerfile"] == "Dockerfile"
    assert env_of(w)["BLENDSERVE_WORKER_ADVERTISE_HOST"] == "server-worker"
    assert devices(doc["services"]["sglang-server"]) == ["0"]


@pytest.mark.parametrize("required", ["BLENDSERVE_API_KEYS", "BLENDSERVE_WORKER_SECRET"])
def test_missing_keys_or_worker_secret_refuse_to_render(required: str) -> None:
    with pytest.raises((ValueError, subprocess.CalledProcessError)):
        render(["gpus-1"], {k: v for k, v in ENV.items() if k != required})


def test_a_key_compose_does_not_know_fails_the_schema(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    doc["services"]["api"]["replica"] = 2          # a typo of deploy.replicas
    schema = json.loads((ROOT / "tests" / "compose_spec.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(interpolate(doc, ENV), schema)


def test_images() -> None:
    sglang = (ROOT / "Dockerfile.sglang").read_text()
    assert re.search(r"^ARG SGLANG_IMAGE=lmsysorg/sglang:v0\.5\.23$", sglang, re.M)
    assert "FROM ${SGLANG_IMAGE}" in sglang
    assert "FROM python:3.11-slim" in (ROOT / "Dockerfile").read_text()     # api, scheduler, openai workers
