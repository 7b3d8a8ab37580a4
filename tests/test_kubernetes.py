"""deploy/kubernetes renders for every overlay, validates against Kubernetes' schemas, and runs what the images run.

Rendered here by a small Kustomize renderer of the features the manifests use (resources, components,
configMapGenerator/secretGenerator with generatorOptions, replicas, images); where `kubectl` is installed,
`kubectl kustomize` renders too and the two must agree object for object, so the renderer cannot drift from
Kustomize. Each object is then validated against the OpenAPI schemas of Kubernetes (kubernetes-validate,
strict: an unknown field fails), and the deployment's promises are checked: N workers hold N GPUs, secrets
come from Secrets only, probes hit the API's real routes, the PDB covers the workers, and every container of
a BlendServe image runs a command line the CLI parses, through the image's own ENTRYPOINT.
"""
from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from fastapi.testclient import TestClient

from blendserve.api.app import create_app
from blendserve.cli import parser
from blendserve.core.config import Settings
from blendserve.core.engine_settings import ServerEngineSettings
from blendserve.process import STOP_GRACE_S
from tests.test_settings_doc import env_names

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("gpus", "external-database", "servers")
K8S_VERSIONS = ("1.31", "1.37")       # an older release still in cloud support, and the newest schemas shipped
SECRET_NAMES = ("BLENDSERVE_API_KEYS", "BLENDSERVE_WORKER_SECRET", "BLENDSERVE_DATABASE_URL", "POSTGRES_PASSWORD",
                "BLENDSERVE_SERVER_API_KEY", "BLENDSERVE_METRICS_TOKEN", "BLENDSERVE_SESSION_SECRET")
REQUIRED = ("BLENDSERVE_API_KEYS", "BLENDSERVE_WORKER_SECRET", "BLENDSERVE_DATABASE_URL")
SECRETS = {"BLENDSERVE_API_KEYS": "team-a:k1,k2", "BLENDSERVE_WORKER_SECRET": "s3cr3t-worker",
           "POSTGRES_PASSWORD": "pg-pass-1",
           "BLENDSERVE_DATABASE_URL": "postgresql+psycopg://blendserve:pg-pass-1@blendserve-postgres:5432/blendserve"}


# --- a renderer of the Kustomize features these manifests use ---------------------------------------------

def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as Kustomize reads an `envs` file: blank lines and # comments skipped."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path}: {line!r} is not KEY=VALUE")
            out[key.strip()] = value
    return out


def _generated(kind: str, spec: dict, root: Path, options: dict) -> dict:
    if not options.get("disableNameSuffixHash"):
        raise NotImplementedError("name suffix hashes: the manifests disable them")
    data: dict[str, str] = {}
    for name in spec.get("envs", []):
        data |= _env_file(root / name)                      # FileNotFoundError: the file must exist
    data |= dict(x.split("=", 1) for x in spec.get("literals", []))
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": spec["name"]}}
    if kind == "Secret":
        obj |= {"type": spec.get("type", "Opaque"),
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
    else:
        obj["data"] = data
    return obj


def _set_image(container: dict, images: list[dict]) -> None:
    name, _, tag = container["image"].partition(":")
    for img in images:
        if img["name"] == name:
            container["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}".rstrip(":")


def _transform(objs: list[dict], k: dict) -> None:
    counts = {r["name"]: r["count"] for r in k.get("replicas", [])}
    for o in objs:
        if o["kind"] in ("Deployment", "StatefulSet") and o["metadata"]["name"] in counts:
            o["spec"]["replicas"] = counts[o["metadata"]["name"]]
        for c in containers(o):
            _set_image(c, k.get("images", []))


def render_python(root: Path) -> list[dict]:
    """A kustomization directory's objects: its resources, then its components, then its generators and
    transformers, each applied to what came before (Kustomize's order)."""
    k = yaml.safe_load((root / "kustomization.yaml").read_text())
    known = {"apiVersion", "kind", "resources", "components", "replicas", "images", "configMapGenerator",
             "secretGenerator", "generatorOptions"}
    assert set(k) <= known, f"{root}: this renderer does not apply {set(k) - known}"
    objs: list[dict] = []
    for entry in k.get("resources", []) + k.get("components", []):
        path = (root / entry).resolve()
        objs += render_python(path) if path.is_dir() else _docs(path)
    options = k.get("generatorOptions", {})
    objs += [_generated("ConfigMap", g, root, options) for g in k.get("configMapGenerator", [])]
    objs += [_generated("Secret", g, root, options) for g in k.get("secretGenerator", [])]
    _transform(objs, k)
    return objs


def render_kubectl(root: Path) -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(root)], capture_output=True, text=True, check=True)
    objs = [d for d in yaml.safe_load_all(out.stdout) if d]
    for o in objs:          # Kustomize folds a long base64 value over lines; the bytes are the same
        if o["kind"] == "Secret":
            o["data"] = {k: "".join(v.split()) for k, v in o["data"].items()}
    return objs


def by_name(objs: list[dict]) -> dict[tuple[str, str], dict]:
    keyed = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    assert len(keyed) == len(objs), "two objects of one kind share a name"
    return keyed


def render(root: Path) -> dict[tuple[str, str], dict]:
    """The overlay's objects by (kind, name): Kustomize's own where kubectl is installed, checked against
    the renderer here; the renderer's alone elsewhere."""
    mine = by_name(render_python(root))
    if shutil.which("kubectl"):
        theirs = by_name(render_kubectl(root))
        assert theirs == mine
    return mine


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of deploy/kubernetes with base/secrets.env written from the example, as an operator does."""
    copy = tmp_path / "kubernetes"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("secrets.env"))
    lines = []
    for line in (copy / "base" / "secrets.env.example").read_text().splitlines():
        key = line.lstrip("#").partition("=")[0]
        lines.append(f"{key}={SECRETS[key]}" if key in SECRETS else line)
    (copy / "base" / "secrets.env").write_text("\n".join(lines) + "\n")
    return copy


def set_workers(tree: Path, overlay: str, n: int) -> None:
    """`kustomize edit set replicas blendserve-worker=N`, done on the file."""
    path = tree / "overlays" / overlay / "kustomization.yaml"
    k = yaml.safe_load(path.read_text())
    k["replicas"] = [{"name": "blendserve-worker", "count": n}]
    path.write_text(yaml.safe_dump(k))


# --- reading rendered objects ------------------------------------------------------------------------------

def pod_spec(o: dict) -> dict | None:
    return o["spec"]["template"]["spec"] if o["kind"] in ("Deployment", "StatefulSet") else None


def containers(o: dict) -> list[dict]:
    spec = pod_spec(o)
    return (spec.get("initContainers", []) + spec["containers"]) if spec else []


def workloads(objs: dict) -> dict[str, dict]:
    return {name: o for (kind, name), o in objs.items() if kind in ("Deployment", "StatefulSet")}


def blendserve_containers(objs: dict) -> list[tuple[str, dict]]:
    return [(name, c) for name, o in workloads(objs).items() for c in containers(o)
            if c["image"].rsplit(":", 1)[0].endswith("blendserve")]


def container_env(objs: dict, c: dict) -> dict[str, str]:
    """The environment a container starts with: its envFrom sources, then its env entries; a value from
    the downward API is left as the field it names."""
    env: dict[str, str] = {}
    for src in c.get("envFrom", []):
        if "configMapRef" in src:
            env |= objs["ConfigMap", src["configMapRef"]["name"]]["data"]
        else:
            data = objs["Secret", src["secretRef"]["name"]]["data"]
            env |= {k: base64.b64decode(v).decode() for k, v in data.items()}
    for e in c.get("env", []):
        ref = e.get("valueFrom", {})
        if "secretKeyRef" in ref:
            s = ref["secretKeyRef"]
            env[e["name"]] = base64.b64decode(objs["Secret", s["name"]]["data"][s["key"]]).decode()
        else:
            env[e["name"]] = e.get("value", ref.get("fieldRef", {}).get("fieldPath"))
    return env


# --- the tests ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_against_the_kubernetes_schemas(tree: Path, overlay: str) -> None:
    objs = render(tree / "overlays" / overlay)
    assert {"Deployment", "Service", "ConfigMap", "Secret", "PersistentVolumeClaim"} <= {k for k, _ in objs}
    for version in K8S_VERSIONS:
        for obj in objs.values():
            kubernetes_validate.validate(obj, version, strict=True)


def test_a_misspelt_field_fails_validation(tree: Path) -> None:
    api = render(tree / "overlays" / "gpus")["Deployment", "blendserve-api"]
    api["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = api["spec"]["template"]["spec"][
        "containers"][0].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(api, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_n_gpu_workers_request_n_gpus(tree: Path, n: int) -> None:
    set_workers(tree, "gpus", n)
    objs = render(tree / "overlays" / "gpus")
    worker = objs["Deployment", "blendserve-worker"]
    assert worker["spec"]["replicas"] == n
    (c,) = containers(worker)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == c["resources"]["requests"]["nvidia.com/gpu"] == 1
    gpus = {name: o["spec"]["replicas"] * sum(x.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)
                                            for x in containers(o)) for name, o in workloads(objs).items()}
    assert sum(gpus.values()) == gpus["blendserve-worker"] == n       # no other pod holds a GPU
    strategy = worker["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxSurge"] == 0          # a surge pod would wait for the GPU its predecessor holds


def test_the_servers_profile_runs_no_gpu_worker_and_points_at_the_server(tree: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    objs = render(tree / "overlays" / "servers")
    assert ("Deployment", "blendserve-worker") not in objs
    assert not any("nvidia.com/gpu" in str(c.get("resources")) for _, o in workloads(objs).items()
                   for c in containers(o))
    (c,) = containers(objs["Deployment", "blendserve-server-worker"])
    args = parser().parse_args(c["args"])
    assert args.cmd == "worker" and args.engine == "openai" and args.url is None
    server_keys = set(objs["ConfigMap", "blendserve-server-engine"]["data"])
    assert server_keys <= {f"BLENDSERVE_SERVER_{f.upper()}" for f in ServerEngineSettings.model_fields}
    for key, value in container_env(objs, c).items():
        monkeypatch.setenv(key, value)
    s = Settings()
    assert s.server_engine.url == "http://sglang-server:30000"
    assert s.server_engine.model == "llama-3.1-8b-instruct" and s.worker_port == 8100


def test_the_external_database_overlay_runs_no_postgres(tree: Path) -> None:
    objs = render(tree / "overlays" / "external-database")
    assert not [k for k in objs if "postgres" in k[1]]
    assert objs["Deployment", "blendserve-worker"]["spec"]["replicas"] == 8
    for name, c in blendserve_containers(objs):
        assert container_env(objs, c)["BLENDSERVE_DATABASE_URL"] == SECRETS["BLENDSERVE_DATABASE_URL"], name


@pytest.mark.parametrize("overlay", ["gpus", "servers"])
def test_the_in_cluster_database_is_where_the_example_url_points(tree: Path, overlay: str) -> None:
    objs = render(tree / "overlays" / overlay)
    example = (DEPLOY / "base" / "secrets.env.example").read_text()
    url = urlsplit(next(line.partition("=")[2] for line in example.splitlines()
                        if line.lstrip("#").startswith("BLENDSERVE_DATABASE_URL=")))
    service = objs["Service", url.hostname]
    assert url.port in [p["port"] for p in service["spec"]["ports"]]
    pg = objs["StatefulSet", url.hostname]
    assert service["spec"]["selector"].items() <= pg["spec"]["template"]["metadata"]["labels"].items()
    env = {e["name"]: e for e in containers(pg)[0]["env"]}
    assert env["POSTGRES_USER"]["value"] == url.username and env["POSTGRES_DB"]["value"] == url.path.strip("/")
    assert pg["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"] == ["ReadWriteOnce"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_come_from_secrets_that_exist(tree: Path, overlay: str) -> None:
    objs = render(tree / "overlays" / overlay)
    for name, o in workloads(objs).items():
        for c in containers(o):
            for src in c.get("envFrom", []):
                ref = src.get("secretRef") or src["configMapRef"]
                kind = "Secret" if "secretRef" in src else "ConfigMap"
                assert (kind, ref["name"]) in objs and not ref.get("optional"), f"{name}: {ref}"
            for e in c.get("env", []):
                assert e["name"] not in SECRET_NAMES or "value" not in e, f"{name} inlines {e['name']}"
                if s := e.get("valueFrom", {}).get("secretKeyRef"):
                    assert s["key"] in objs["Secret", s["name"]]["data"], f"{name}: {s}"
    for name, c in blendserve_containers(objs):
        env = container_env(objs, c)
        for key in REQUIRED:
            assert env[key] == SECRETS[key], f"{name} lacks {key}"


def required_refs(c: dict) -> dict[str, dict]:
    """The container's secretKeyRefs Kubernetes must resolve before it starts the container."""
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {}) and not e["valueFrom"]["secretKeyRef"].get("optional")}


def test_an_unfilled_example_starts_no_role(tmp_path: Path) -> None:
    """secrets.env copied as it ships: no key is set, so Kubernetes refuses every BlendServe container
    (and PostgreSQL) at start, rather than running the API with no keys, as compose's `:?` refuses."""
    copy = tmp_path / "kubernetes"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("secrets.env"))
    shutil.copy(copy / "base" / "secrets.env.example", copy / "base" / "secrets.env")
    objs = render(copy / "overlays" / "gpus")
    assert not objs["Secret", "blendserve-secrets"].get("data")
    refs = {name: required_refs(c) for name, o in workloads(objs).items() for c in containers(o)}
    for name, _ in blendserve_containers(objs):
        assert set(REQUIRED) <= set(refs[name]), f"{name} would start without {set(REQUIRED) - set(refs[name])}"
    assert refs["blendserve-postgres"]["POSTGRES_PASSWORD"]["name"] == "blendserve-secrets"


def test_every_setting_given_is_one_the_roles_read(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings ignore unknown variables, so a misspelt BLENDSERVE_* would be dropped silently: each one a
    container gets is a setting, and the settings parse from that environment."""
    readable = env_names(Settings)
    for overlay in OVERLAYS:
        objs = render(tree / "overlays" / overlay)
        for name, c in blendserve_containers(objs):
            env = container_env(objs, c)
            assert {k for k in env if k.startswith("BLENDSERVE_")} <= readable, name
            with monkeypatch.context() as m:
                for key, value in env.items():
                    m.setenv(key, value)
                s = Settings()
            assert s.database_url == SECRETS["BLENDSERVE_DATABASE_URL"] and s.data_dir == Path("/data"), name
            assert len(s.api_keys) == 2 and s.worker_secret == SECRETS["BLENDSERVE_WORKER_SECRET"], name


def test_no_committed_manifest_holds_a_secret_value() -> None:
    for path in DEPLOY.rglob("*.yaml"):
        text = path.read_text()
        for name in SECRET_NAMES:
            assert f"{name}=" not in text, f"{path} writes {name} in a literal"
        for doc in _docs(path):
            for gen in doc.get("secretGenerator", []) + doc.get("configMapGenerator", []):
                assert not {x.partition("=")[0] for x in gen.get("literals", [])} & set(SECRET_NAMES), path
            if doc.get("kind") in ("Secret", "ConfigMap"):
                assert not set(doc.get("data", {}) | doc.get("stringData", {})) & set(SECRET_NAMES), path
    assert "secrets.env" in (DEPLOY / ".gitignore").read_text().splitlines()
    if (ROOT / ".git").exists():        # a checkout: git itself says the filled-in file stays out
        ignored = subprocess.run(["git", "check-ignore", "-q", str(DEPLOY / "base" / "secrets.env")], cwd=ROOT)
        assert ignored.returncode == 0, "base/secrets.env would be committed"


def test_without_secrets_env_nothing_renders(tmp_path: Path) -> None:
    copy = tmp_path / "kubernetes"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("secrets.env"))
    with pytest.raises(FileNotFoundError):
        render_python(copy / "overlays" / "gpus")
    if shutil.which("kubectl"):
        with pytest.raises(subprocess.CalledProcessError):
            render_kubectl(copy / "overlays" / "gpus")


def test_the_api_probes_hit_its_real_routes(tree: Path, tmp_path: Path) -> None:
    objs = render(tree / "overlays" / "gpus")
    api = objs["Deployment", "blendserve-api"]
    assert api["spec"]["replicas"] == 2
    (c,) = containers(api)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    args = parser().parse_args(c["args"])
    assert args.cmd == "api" and args.host == "0.0.0.0" and ports["http"] == args.port
    service = objs["Service", "blendserve-api"]
    assert service["spec"]["ports"][0]["targetPort"] in ports
    assert service["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()
    probes = {kind: c[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["path"] == "/health" and probes["readinessProbe"]["path"] == "/ready"
    app = create_app(Settings(data_dir=tmp_path / "data"))
    with TestClient(app) as client:
        routes = client.get("/openapi.json").json()["paths"]
        for kind, probe in probes.items():
            assert probe["port"] in ports and "get" in routes[probe["path"]], kind
        assert client.get(probes["livenessProbe"]["path"]).status_code == 200
        not_ready = client.get(probes["readinessProbe"]["path"])      # no scheduler, no worker here
        assert not_ready.status_code == 503 and "no scheduler holds a fresh lease" in not_ready.json()["reasons"]


@pytest.mark.parametrize(("overlay", "worker"), [("gpus", "blendserve-worker"),
                                                 ("servers", "blendserve-server-worker")])
def test_the_pdb_and_network_policy_cover_the_workers_and_they_stop_gracefully(tree: Path, overlay: str,
                                                                              worker: str) -> None:
    objs = render(tree / "overlays" / overlay)
    (pdb,) = [o for (kind, _), o in objs.items() if kind == "PodDisruptionBudget"]
    assert selecting(objs, pdb["spec"]["selector"]["matchLabels"]) == [worker] and pdb["spec"]["maxUnavailable"] == 1
    spec = pod_spec(objs["Deployment", worker])
    (c,) = spec["containers"]
    pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    # SIGTERM comes after the preStop; the stop (results written, chunks handed back) then needs its time.
    assert spec["terminationGracePeriodSeconds"] >= float(pre_stop[1]) + 2 * STOP_GRACE_S
    env = container_env(objs, c)
    assert env["BLENDSERVE_WORKER_ADVERTISE_HOST"] == "status.podIP"       # the API dials the pod
    assert int(env["BLENDSERVE_WORKER_PORT"]) in [p["containerPort"] for p in c["ports"]]
    assert env["BLENDSERVE_WORKER_HOST"] == "0.0.0.0"
    (policy,) = [o for (kind, _), o in objs.items() if kind == "NetworkPolicy"]
    assert selecting(objs, policy["spec"]["podSelector"]["matchLabels"]) == [worker]
    (rule,) = policy["spec"]["ingress"]
    assert [selecting(objs, f["podSelector"]["matchLabels"]) for f in rule["from"]] == [["blendserve-api"]]
    assert [p["port"] for p in rule["ports"]] == [p["name"] for p in c["ports"]]     # the interactive port


def selecting(objs: dict, labels: dict) -> list[str]:
    """The workloads whose pods carry every one of these labels."""
    return [name for name, o in workloads(objs).items()
            if labels.items() <= o["spec"]["template"]["metadata"]["labels"].items()]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_and_command_lines_are_the_dockerfiles(tree: Path, overlay: str) -> None:
    """No container replaces an image's ENTRYPOINT (`blendserve`; the SGLang image's runs `blendserve doctor`
    first): each passes a role and its options, as the CLI parses them, to the image built for that role."""
    assert '"blendserve"' in (ROOT / "Dockerfile").read_text().split("ENTRYPOINT", 1)[1].splitlines()[0]
    assert 'exec blendserve \\"$@\\"' in (ROOT / "Dockerfile.sglang").read_text().split("ENTRYPOINT", 1)[1]
    objs = render(tree / "overlays" / overlay)
    roles = {}
    for name, c in blendserve_containers(objs):
        assert "command" not in c, f"{name} bypasses the image's ENTRYPOINT"
        args = parser().parse_args(c["args"])
        gpu = getattr(args, "engine", None) in ("sglang", "vllm")
        assert c["image"] == f"registry.example.com/blendserve:{'sglang' if gpu else 'slim'}", name
        roles[name] = args.cmd
        models = Settings(_env_file=None, models=container_env(objs, c)["BLENDSERVE_MODELS"]).models
        mounts = [m["mountPath"] for m in c["volumeMounts"]]
        assert all(any(str(p).startswith(m + "/") for m in mounts) for p in models.values()), name
    assert roles["blendserve-api"] == "api" and roles["blendserve-scheduler"] == "scheduler"
    assert objs["Deployment", "blendserve-scheduler"]["spec"]["replicas"] == 2     # one leads, one stands by
    assert sorted(roles.values()).count("worker") == 1
