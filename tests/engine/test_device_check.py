"""scripts/device_check.sh on CPU: the path it takes on an air-gapped GPU machine, every line that runs here.

The script runs in an interpreter that sees only what that machine has (the standard library, torch and
what its wheel depends on, numpy, the repository): site-packages is off (``python -S``) and only those
packages are on the path, so an import of pydantic, transformers, safetensors, ... on the check's path fails
here. The model is Llama-3.1-8B's vendored config.json cut to a few layers of width 64.
"""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from blendserve.core.engine_settings import CpuEngineSettings
from blendserve.worker.engines.base import GenRequest, SamplingParams
from blendserve.worker.engines.cpu import CpuEngine
from blendserve.worker.engines.cpu.id_tokenizer import IdTokenizer
from blendserve.worker.engines.cpu.model import Llama, random_weights_of
from tests.harness.device_engine import LLAMA_8B, engine_settings

ROOT = Path(__file__).resolve().parents[2]
# What the GPU machine holds: torch 2.11 and its dependencies (its wheel's Requires-Dist), numpy, triton.
AIRGAP = ("torch", "torchgen", "functorch", "numpy", "numpy.libs", "triton", "filelock", "typing_extensions.py",
          "sympy", "mpmath", "networkx", "jinja2", "markupsafe", "fsspec")


def small_config(directory: Path) -> Path:
    """Llama-3.1-8B's config (llama3 rope scaling, 128K vocabulary, GQA) at width 64, 2 layers, context 256."""
    cfg = json.loads((LLAMA_8B / "config.json").read_text())
    cfg.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.2)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg))
    return directory


def airgap(directory: Path) -> Path:
    """A folder holding links to the air-gapped machine's packages only."""
    directory.mkdir()
    packages = Path(site.getsitepackages()[0])
    for name in AIRGAP:
        if (packages / name).exists():
            (directory / name).symlink_to(packages / name)
    return directory


def test_device_check_runs_with_only_torch_and_numpy(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHON=f"{sys.executable} -S", PYTHONPATH=str(airgap(tmp_path / "site")),
               DEVICE="cpu", CONFIG=str(small_config(tmp_path / "model")), REQUESTS="16", MAX_OUTPUT="8",
               KV_GB="0.01")
    out = tmp_path / "result.json"
    proc = subprocess.run([str(ROOT / "scripts" / "device_check.sh"), "--json", str(out)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No module named" not in proc.stderr.replace("No module named 'setuptools'", "")   # the CPU kernel's build
    res = json.loads(out.read_text())["results"]
    assert list(res) == ["blendserve", "dfs", "fcfs"]
    # The same requests in three orders, each output to its max_tokens (random weights end none early).
    assert len({(r["prompt_tokens"], r["output_tokens"]) for r in res.values()}) == 1
    assert res["fcfs"]["output_tokens"] > 16
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("policy"))
    assert "vs best baseline" in lines[header]
    rows = {line.split()[0]: line.split() for line in lines[header + 1:header + 4]}
    assert set(rows) == {"blendserve", "dfs", "fcfs"}
    assert max(float(rows[p][-1].rstrip("x")) for p in ("dfs", "fcfs")) == 1.0


def test_settings_without_pydantic_hold_every_engine_setting() -> None:
    args = SimpleNamespace(kv_gb=1.0, max_running=8, step_tokens=64, device="cpu")
    assert set(vars(engine_settings(args))) == set(CpuEngineSettings.model_fields)


def test_random_weights_have_llama_3_1_8b_shapes() -> None:
    """On the meta device: shapes without memory. 8,030,261,248 parameters is Llama-3.1-8B's published count."""
    cfg = json.loads((LLAMA_8B / "config.json").read_text())
    weights = random_weights_of(cfg, torch.bfloat16, torch.device("meta"))
    assert sum(w.numel() for w in weights.values()) == 8_030_261_248
    model = Llama(LLAMA_8B, torch.bfloat16, "meta", random_weights=True)
    assert model.kv_bytes_per_token() == 128 * 1024 and model.embed.device.type == "meta"


def test_random_weights_engine_takes_ids_and_runs_to_max_tokens(tmp_path: Path) -> None:
    engine = CpuEngine(small_config(tmp_path), "small", threads=1, kv_capacity_tokens=2048,
                       config=CpuEngineSettings(load_format="dummy", native=False))
    assert isinstance(engine.tokenizer, IdTokenizer) and not engine.eos
    params = [SamplingParams(max_tokens=9, temperature=0.0, logit_bias=((7, 100.0),)),
              SamplingParams(max_tokens=9, temperature=0.8, seed=1, logprobs=2, n=2)]
    results = {r.key: r for r in engine.generate(GenRequest(i, [5, 6, 7, 8], p) for i, p in enumerate(params))}
    assert results[0].output_ids == [7] * 9 and results[0].text == "<7>" * 9
    assert [len(c.output_ids) for c in [results[1], *results[1].choices]] == [9, 9]
    assert len(results[1].logprobs) == 9 and results[1].logprobs[0].token.startswith("<")
    # A schema needs a tokenizer to compile: that request fails alone, with the reason.
    [refused] = engine.generate([GenRequest(9, [5, 6], SamplingParams(max_tokens=2, json_schema='{"type": "object"}'))])
    assert refused.error and "needs the model's tokenizer" in refused.error


def test_random_weights_with_a_smaller_tokenizer_decode_what_it_knows(tmp_path: Path, tiny_model: Path) -> None:
    """The service's way to run random weights: a tokenizer beside config.json (the tiny model's 512 tokens
    here, SmolLM2's 49K in practice) validates and renders prompts; ids past it decode to nothing."""
    directory = small_config(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (tiny_model / name).is_file():
            (directory / name).write_bytes((tiny_model / name).read_bytes())
    engine = CpuEngine(directory, "small", threads=1, kv_capacity_tokens=2048,
                       config=CpuEngineSettings(load_format="dummy", native=False))
    assert not isinstance(engine.tokenizer, IdTokenizer) and not engine.eos
    [result] = engine.generate([GenRequest(0, [5, 6, 7], SamplingParams(max_tokens=6, temperature=1.0, seed=3,
                                                                        logprobs=1))])
    assert len(result.output_ids) == 6 and len(result.logprobs) == 6
    assert max(result.output_ids) >= 512      # a 128K vocabulary's ids, most past the tokenizer's
    assert result.text == engine.tokenizer.decode([t for t in result.output_ids if t < 512])
