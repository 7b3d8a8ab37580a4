"""`blendserve doctor` on a CPU box: each check made to fail (a fake Python 3.10, a PATH without nvcc, no
venv module, an old driver ...) names the failure and its fix; a fresh Ubuntu 22.04 GPU box's missing
prerequisites all come out of one run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from blendserve import doctor
from blendserve.doctor import FAIL, OK, SKIP, WARN, Check, Probes, Target

ROOT = Path(__file__).resolve().parent.parent
H100 = "NVIDIA H100 80GB HBM3, 81559, 81000, 580.65.06, 9.0"
A100 = "NVIDIA A100-SXM4-40GB, 40960, 40000, 580.65.06, 8.0"


def fake_python(tmp_path: Path, version: str, venv: bool = True) -> str:
    """An interpreter that says it is `version` and, unless `venv`, has no ensurepip (Debian's python3)."""
    path = tmp_path / f"python{version}"
    path.write_text(f"""#!/bin/sh
case "$2" in
  *ensurepip*) {'exit 0' if venv else 'echo "No module named ensurepip" >&2; exit 1'} ;;
  *"%d.%d.%d"*) echo {version} ;;
  *"%d.%d"*) echo {'.'.join(version.split('.')[:2])} ;;
  *) exit 0 ;;
esac
""")
    path.chmod(0o755)
    return str(path)


def machine(gpu: str | None = H100, tools: tuple[str, ...] = ("cc", "nvcc", "nvidia-smi"),
            libs: str = "libnuma.so.1 (libc6,x86-64) => /lib/libnuma.so.1") -> Probes:
    """A GPU box as the probes see it; the interpreter probes run for real (a fake python is a script)."""
    def which(name: str) -> str | None:
        return f"/usr/bin/{name}" if name in tools else None

    def run(argv: list[str]) -> tuple[int, str]:
        if argv[0] == "nvidia-smi":
            return (0, gpu) if gpu is not None else (9, "No devices were found")
        try:
            p = subprocess.run(argv, capture_output=True, text=True)
        except FileNotFoundError:
            return 127, f"{argv[0]}: not found"
        return p.returncode, (p.stdout + p.stderr).strip()

    return Probes(which=which, run=run, libraries=lambda: libs, env={"CUDA_HOME": "/nonexistent"})


def by_name(rows: list[Check]) -> dict[str, Check]:
    return {r.name: r for r in rows}


def system(t: Target, p: Probes) -> dict[str, Check]:
    return by_name(doctor.checks(Target(**{**vars(t), "before_install": True}), p))


def test_a_fresh_ubuntu_2204_gpu_box_names_every_missing_prerequisite_in_one_run(tmp_path: Path, capsys) -> None:
    """Python 3.10 only, no venv module, no nvcc: one run, three failures, each with its fix; exit 1."""
    py = fake_python(tmp_path, "3.10.12", venv=False)
    p = machine(gpu=A100, tools=("cc", "nvidia-smi"))
    code = doctor.main(["--engine", "sglang", "--before-install", "--python", py], probes=p)
    out = capsys.readouterr().out
    assert code == 1
    assert "3 check(s) failed: python, venv module, nvcc" in out
    assert "Python 3.10.12; sglang needs 3.11+" in out and "sudo apt-get install python3.11" in out
    assert "sudo apt-get install python3.10-venv" in out
    assert "no nvcc" in out and "cuda-nvcc" in out
    assert "ok    GPU and driver" in out


def test_everything_there_passes(tmp_path: Path) -> None:
    rows = system(Target(engine="sglang", python=fake_python(tmp_path, "3.12.3")), machine())
    assert {r.status for r in rows.values()} == {OK}, rows


def test_python_310_fails_for_sglang_and_passes_for_vllm(tmp_path: Path) -> None:
    py = fake_python(tmp_path, "3.10.12")
    assert system(Target(engine="sglang", python=py), machine())["python"].status == FAIL
    assert system(Target(engine="vllm", python=py), machine())["python"].status == OK


def test_a_python_that_does_not_run(tmp_path: Path) -> None:
    row = system(Target(engine="sglang", python=str(tmp_path / "python3.13")), machine())["python"]
    assert row.status == FAIL and "does not run" in row.found


def test_no_venv_module(tmp_path: Path) -> None:
    row = system(Target(engine="sglang", python=fake_python(tmp_path, "3.11.0", venv=False)), machine())
    assert row["venv module"].status == FAIL and row["venv module"].fix == "sudo apt-get install python3.11-venv"


def test_nvcc_is_needed_where_flashinfer_compiles(tmp_path: Path) -> None:
    """Below Hopper SGLang's default attention is flashinfer, which compiles with nvcc; on an H100 it is not
    (a warning); named explicitly, it is needed everywhere."""
    py = fake_python(tmp_path, "3.11.0")
    a100 = system(Target(engine="sglang", python=py), machine(gpu=A100, tools=("cc", "nvidia-smi")))["nvcc"]
    h100 = system(Target(engine="sglang", python=py), machine(gpu=H100, tools=("cc", "nvidia-smi")))["nvcc"]
    named = system(Target(engine="sglang", python=py, attention_backend="flashinfer"),
                   machine(gpu=H100, tools=("cc", "nvidia-smi")))["nvcc"]
    assert (a100.status, h100.status, named.status) == (FAIL, WARN, FAIL)
    assert system(Target(engine="vllm", python=py), machine(tools=("cc", "nvidia-smi")))["nvcc"].status == SKIP


def test_nvcc_under_cuda_home_counts(tmp_path: Path) -> None:
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    (tmp_path / "cuda" / "bin" / "nvcc").write_text("")
    p = machine(gpu=A100, tools=("cc", "nvidia-smi"))
    p.env = {"CUDA_HOME": str(tmp_path / "cuda")}
    assert system(Target(engine="sglang", python=fake_python(tmp_path, "3.11.0")), p)["nvcc"].status == OK


def test_an_old_driver_against_the_cuda_13_build(tmp_path: Path) -> None:
    old = H100.replace("580.65.06", "550.54.15")
    row = system(Target(engine="sglang", python=fake_python(tmp_path, "3.11.0")), machine(gpu=old))["GPU and driver"]
    assert row.status == FAIL and "driver 550 < 580" in row.found and "v0.5.19-cu129" in row.fix


def test_no_gpu_no_compiler_no_libnuma(tmp_path: Path) -> None:
    rows = system(Target(engine="sglang", python=fake_python(tmp_path, "3.11.0")),
                  machine(tools=(), libs="libc.so.6"))
    assert rows["GPU and driver"].status == FAIL and "no nvidia-smi" in rows["GPU and driver"].found
    assert rows["C compiler"].status == FAIL and rows["C compiler"].fix == "sudo apt-get install gcc"
    assert rows["libnuma"].status == FAIL and rows["libnuma"].fix == "sudo apt-get install libnuma1"
    failing = machine(gpu=None)
    assert system(Target(engine="sglang", python=fake_python(tmp_path, "3.11.0")),
                  failing)["GPU and driver"].status == FAIL


def test_the_cpu_test_bed_skips_the_gpu_checks(tmp_path: Path) -> None:
    rows = system(Target(engine="sglang", python=fake_python(tmp_path, "3.11.0"), device="cpu"), machine(tools=()))
    assert set(rows) == {"python", "venv module"}


def test_the_engine_does_not_load(tmp_path: Path) -> None:
    """Installed-engine checks: sglang missing from the interpreter (the main venv has none)."""
    from blendserve.core.config import Settings

    settings = Settings(data_dir=tmp_path / "data")
    rows = by_name(doctor.checks(Target(engine="sglang", python=sys.executable, device="cpu", settings=settings),
                                 machine()))
    assert rows["sglang loads"].status == FAIL and "No module named 'sglang'" in rows["sglang loads"].found
    assert "pip install '.[sglang]'" in rows["sglang loads"].fix
    assert rows["database"].status == OK


def test_a_model_without_a_tokenizer_and_a_missing_model(tmp_path: Path, smollm2_checkpoint: Path) -> None:
    assert doctor.model(Target(engine="vllm", model=str(smollm2_checkpoint))).status == OK
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text("{}")
    row = doctor.model(Target(engine="vllm", model=str(bare)))
    assert row.status == FAIL and "no tokenizer" in row.found
    assert doctor.model(Target(engine="vllm", model=str(tmp_path / "none"))).status == FAIL


def test_gpu_memory_for_weights_and_a_kv_pool(tmp_path: Path) -> None:
    ckpt = tmp_path / "m"
    ckpt.mkdir()
    with open(ckpt / "model.safetensors", "wb") as f:
        f.truncate(30 * 2**30)              # a sparse 30 GiB: an 8B model in bf16 is ~16 GiB
    small = [dict(name="L4", total_mib="23034", free_mib="23000", driver="580.1", cc="8.9")]
    big = [dict(name="H100", total_mib="81559", free_mib="81000", driver="580.1", cc="9.0")]
    t = Target(engine="vllm", model=str(ckpt))
    assert doctor.gpu_memory(t, small).status == FAIL
    assert doctor.gpu_memory(t, big).status == OK
    assert doctor.gpu_memory(Target(engine="vllm", model=str(ckpt), tp=2), small).status == OK    # 15 GiB each


def test_a_database_that_does_not_answer() -> None:
    from blendserve.core.config import Settings

    settings = Settings(database_url="postgresql+psycopg://u:secret@127.0.0.1:1/none")
    row = doctor.database(Target(engine="cpu", settings=settings))
    assert row.status == FAIL and "BLENDSERVE_DATABASE_URL" in row.fix and "secret" not in row.found


def test_an_engine_server_that_does_not_answer_and_one_that_does(monkeypatch: pytest.MonkeyPatch) -> None:
    down = doctor.server(Target(engine="openai", url="http://127.0.0.1:1"))
    assert down.status == FAIL and "start the server" in down.fix

    def sglang(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        if request.url.path == "/server_info":
            return httpx.Response(200, json={"max_total_num_tokens": 500000, "max_running_requests": None,
                                             "chunked_prefill_size": 8192, "enable_priority_scheduling": False,
                                             "internal_states": [{"effective_max_running_requests_per_dp": 3000}]})
        return httpx.Response(404)

    real = httpx.AsyncClient

    def mocked(*a, **kw):
        return real(*a, transport=httpx.MockTransport(sglang), **kw)

    monkeypatch.setattr(httpx, "AsyncClient", mocked)
    row = doctor.server(Target(engine="openai", url="http://sglang:30000"))
    assert row.status == WARN and "running cap 3000" in row.found and "--enable-priority-scheduling" in row.fix


def test_the_worker_images_entry_point_passes_the_workers_flags() -> None:
    args = doctor.parser().parse_args(["--before-install", "--worker-args", "worker", "--engine", "sglang",
                                       "--model", "llama", "--tp", "2", "--data-dir", "/d"])
    t = doctor.target_from(args)
    assert (t.engine, t.model, t.tp) == ("sglang", "llama", 2)


def test_the_system_checks_run_on_python_310_with_the_standard_library_alone(tmp_path: Path) -> None:
    """gpu_check.sh runs `python3 -m blendserve.doctor --before-install` before installing anything: the
    module must import with no third-party package (an isolated interpreter, -I -S)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import blendserve.doctor as d; "
            "assert not [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'httpx', 'sqlalchemy', 'core')]")
    p = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT)], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert p.returncode == 0, p.stderr


def test_gpu_check_runs_the_doctor_first() -> None:
    script = (ROOT / "scripts" / "gpu_check.sh").read_text()
    before = script.index("blendserve.doctor --engine sglang --before-install")
    assert before < script.index("pip\" install")
    assert "python3.13 python3.12 python3.11" in script
