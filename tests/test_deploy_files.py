"""The deployment files: ray_cluster.yaml against Ray's own schema, docker-compose.yml's shape.

Docker is not available on the test machines, so the compose file is checked for
its structure: the services, their health checks and start order, pinned images,
and no secret written into it.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SECRET_WORDS = re.compile(r"(password|passwd|secret|token|api_key|apikey|dsn)", re.I)


def _load(name: str) -> Any:
    return yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))


# -- ray_cluster.yaml ------------------------------------------------------------------


def test_ray_cluster_yaml_passes_rays_preparation_and_schema() -> None:
    pytest.importorskip("ray")
    jsonschema = pytest.importorskip("jsonschema")
    import ray.autoscaler
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = _load("ray_cluster.yaml")
    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(raw, schema)  # as written, too
    prepared = prepare_config(copy.deepcopy(raw))
    validate_config(prepared)  # Ray's own check: the schema plus its extra rules
    jsonschema.validate(prepared, schema)

    assert prepared["provider"]["type"] == "local"
    assert prepared["max_workers"] == len(raw["provider"]["worker_ips"])
    setup = " ".join(prepared["head_setup_commands"])
    # the package comes from the wheel built here and copied to every node, not an index
    assert prepared["file_mounts"] == {"~/dream-memory-dist": "./dist"}
    assert "pip install" in setup and "~/dream-memory-dist/dream_memory_actor-*.whl" in setup
    assert "dream-memory-actor[" not in setup and "dream_memory_actor[" not in setup
    assert prepared["worker_setup_commands"] == prepared["head_setup_commands"]
    # into a virtual environment (PEP 668 refuses --user installs on current Debian and
    # Ubuntu), with the default embedding model's extra
    assert "--user" not in setup and "python3 -m venv ~/dream-memory-venv" in setup
    assert "multilingual" in re.search(r"\[([a-z,]+)\]\"", setup).group(1)  # type: ignore[union-attr]
    head = " ".join(prepared["head_start_ray_commands"])
    assert "ray start --head" in head
    assert "dream_memory_actor.cli system start" in head  # starts the memory system
    assert "DREAM_MEMORY_METRICS=ray" in head
    worker = " ".join(prepared["worker_start_ray_commands"])
    assert "ray start --address=$RAY_HEAD_IP:6379" in worker
    for commands in (prepared["head_start_ray_commands"], prepared["worker_start_ray_commands"]):
        starts = [c for c in commands if "ray start" in c or "system start" in c]
        assert starts and all("RAY_AUTH_MODE=token" in c for c in starts)


def test_ray_cluster_yaml_installs_the_wheel_this_repository_builds(tmp_path: Path) -> None:
    """The build command at the top of the file makes the one wheel the setup installs,
    with every extra the setup asks for."""
    import fnmatch
    import subprocess
    import sys
    import zipfile

    raw = _load("ray_cluster.yaml")
    text = (ROOT / "ray_cluster.yaml").read_text(encoding="utf-8")
    assert "python -m pip wheel --no-deps -w dist ." in text
    out = tmp_path / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1
    setup = " ".join(raw["setup_commands"])
    pattern = re.search(r"~/dream-memory-dist/(\S+\.whl)", setup)
    assert pattern and fnmatch.fnmatch(wheels[0].name, pattern.group(1))
    with zipfile.ZipFile(wheels[0]) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        extras = set(re.findall(r"^Provides-Extra: (\S+)", z.read(meta).decode(), re.M))
        assert "dream_memory_actor/storage/redis/cluster.py" in z.namelist()
    wanted = re.search(r"\[([a-z,]+)\]\"", setup)
    assert wanted and set(wanted.group(1).split(",")) <= extras


def test_ray_cluster_yaml_holds_no_secret() -> None:
    text = (ROOT / "ray_cluster.yaml").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        assert not re.search(r"(PASSWORD|API_KEY|_DSN)\s*=", line), line
        assert "postgresql://" not in line, line


def test_a_broken_cluster_config_is_refused() -> None:
    """The check above has teeth: an unknown field fails Ray's schema."""
    pytest.importorskip("ray")
    jsonschema = pytest.importorskip("jsonschema")
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = _load("ray_cluster.yaml")
    raw["head_start_commands"] = ["typo"]
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(raw))


# -- docker-compose.yml ----------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = _load("docker-compose.yml")
    assert isinstance(data, dict)
    return data


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def test_compose_services_and_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) >= {"postgres", "redis", "ray-head", "ray-worker", "mcp"}
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")
    assert services["postgres"]["image"].endswith("-pg17")
    assert services["redis"]["image"].startswith("redis/redis-stack-server:")
    for name, svc in services.items():
        image = svc.get("image")
        assert image, f"{name} has no image"
        tag = image.rsplit(":", 1)[1] if ":" in image else ""
        assert tag and tag != "latest", f"{name}: image {image!r} is not pinned"
        if "build" in svc:
            build = svc["build"]
            assert (ROOT / build["context"] / build["dockerfile"]).is_file()


def test_compose_health_checks_and_start_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, svc in services.items():
        check = svc.get("healthcheck")
        assert check and check.get("test"), f"{name} has no health check"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
        for key in ("interval", "timeout", "retries"):
            assert key in check, f"{name}: healthcheck without {key}"
    order = {
        "ray-head": {"postgres", "redis"},
        "ray-worker": {"ray-head"},
        "mcp": {"ray-head", "ray-worker"},
    }
    for name, needs in order.items():
        deps = services[name]["depends_on"]
        assert isinstance(deps, dict), f"{name}: depends_on needs conditions"
        assert set(deps) >= needs, name
        for dep in needs:
            assert deps[dep]["condition"] == "service_healthy", f"{name} -> {dep}"
            assert "healthcheck" in services[dep]
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "FT._LIST" in " ".join(services["redis"]["healthcheck"]["test"])


def test_compose_holds_no_literal_secret(compose: dict[str, Any]) -> None:
    ref = re.compile(r"\$\{[A-Z_][A-Z0-9_]*(:?[-?][^}]*)?\}")
    for name, svc in compose["services"].items():
        for key, value in _env(svc).items():
            if SECRET_WORDS.search(key) or "://" in value:
                # every credential part is a ${VAR} reference, never a literal
                stripped = ref.sub("", value)
                assert not re.search(r"://[^/@]*:[^/@${}]+@", stripped), (name, key)
                if SECRET_WORDS.search(key) and not key.endswith(("_USER", "_DB")):
                    assert ref.search(value), f"{name}: {key} is not a ${{VAR}} reference"
                    if "://" not in value:  # only the reference and flags remain
                        assert re.fullmatch(r"(\s*--[\w-]+(\s+(yes|no))?)*\s*", stripped), (
                            name, key, stripped)
    text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert not re.search(r"sk-[A-Za-z0-9]{10,}", text)
    for ref_ in re.findall(r"\$\{(\w*(?:PASSWORD|TOKENS))[^}]*\}", text):
        # required secrets fail loudly when missing instead of defaulting to something
        assert re.search(r"\$\{" + ref_ + r":\?", text), ref_


def test_compose_services_share_the_memory_settings(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("ray-head", "ray-worker", "mcp"):
        env = _env(services[name])
        assert env["DREAM_MEMORY_BACKEND"].startswith("${DREAM_MEMORY_BACKEND")
        assert "@postgres:5432/" in env["DREAM_MEMORY_POSTGRES_DSN"]
        assert "@redis:6379/" in env["DREAM_MEMORY_REDIS_URL"]
        assert env["DREAM_MEMORY_METRICS"] == "ray"
    assert "dream-memory system start" in services["ray-head"]["command"]
    assert "--transport http" in services["mcp"]["command"]
    assert "--ray-system default" in services["mcp"]["command"]
    assert "DREAM_MEMORY_MCP_TOKENS" in _env(services["mcp"])
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} to all hosts"


def test_env_example_lists_every_variable(compose: dict[str, Any]) -> None:
    text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    used = set(re.findall(r"\$\{(\w+)", text))
    example = (ROOT / "docker" / "env.example").read_text(encoding="utf-8")
    listed = set(re.findall(r"^(\w+)=", example, re.M))
    assert used <= listed, used - listed
    assert not re.search(r"^\w*(PASSWORD|TOKENS)=\S", example, re.M)  # no sample secrets


def test_compose_prometheus_scrapes_every_ray_node_and_the_mcp_server(
        compose: dict[str, Any]) -> None:
    services = compose["services"]
    prom = services["prometheus"]
    mounts = [str(v) for v in prom["volumes"]]
    config_mount = next(m for m in mounts if m.endswith(":/etc/prometheus/prometheus.yml:ro"))
    config_path = ROOT / config_mount.split(":", 1)[0]
    assert config_path.is_file()
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    targets: dict[str, int] = {}  # host -> port scraped
    for job in config["scrape_configs"]:
        assert job["job_name"]
        for static in job.get("static_configs", []):
            for t in static["targets"]:
                host, _, port = t.rpartition(":")
                targets[host] = int(port)
        for sd in job.get("dns_sd_configs", []):
            assert sd["type"] == "A"
            for name in sd["names"]:
                targets[name] = int(sd["port"])
    ray_services = {name for name, svc in services.items()
                    if "ray start" in str(svc.get("command", ""))}
    assert ray_services == {"ray-head", "ray-worker", "mcp"}
    for name in ray_services:  # each node exports where Prometheus looks
        port = re.search(r"--metrics-export-port=(\d+)", services[name]["command"])
        assert port, f"{name} exports no metrics"
        assert targets.get(name) == int(port.group(1)), name
    assert "/-/ready" in " ".join(prom["healthcheck"]["test"])


def test_compose_turns_on_ray_token_authentication(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        if "ray start" not in str(svc.get("command", "")):
            continue
        env = _env(svc)
        assert env["RAY_AUTH_MODE"] == "token", name
        assert env["RAY_AUTH_TOKEN"].startswith("${RAY_AUTH_TOKEN:?"), name  # required


# -- deploy/kubernetes (KubeRay) -------------------------------------------------------
#
# KubeRay's CRD schemas are not published in any Python or npm package, so the
# manifests are checked for the structure KubeRay reads (ray.io/v1), not against the CRD.

KUBE = ROOT / "deploy" / "kubernetes"


def _kube_docs(name: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((KUBE / name).read_text(encoding="utf-8")) if d]
    assert all(isinstance(d, dict) and d.get("apiVersion") and d.get("kind") for d in docs)
    return docs


def _quantity(value: str) -> float:
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix, factor in units.items():
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


def _pod_templates(cluster: dict[str, Any]) -> list[tuple[dict[str, str], dict[str, Any]]]:
    spec = cluster["spec"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    return [(g["rayStartParams"], g["template"]) for g in groups]


@pytest.fixture(scope="module")
def kuberay() -> dict[str, dict[str, Any]]:
    docs = _kube_docs("raycluster.yaml")
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"RayCluster", "RayJob", "ConfigMap"}
    assert len(docs) == 3
    return by_kind


def test_raycluster_groups(kuberay: dict[str, dict[str, Any]]) -> None:
    cluster = kuberay["RayCluster"]
    assert cluster["apiVersion"] == "ray.io/v1"
    import ray

    assert cluster["spec"]["rayVersion"] == ray.__version__  # the image's Ray (Dockerfile)
    names = [g["groupName"] for g in cluster["spec"]["workerGroupSpecs"]]
    assert len(names) == len(set(names)) and "memory" in names
    for g in cluster["spec"]["workerGroupSpecs"]:
        counts = [g["minReplicas"], g["replicas"], g["maxReplicas"]]
        assert all(isinstance(c, int) for c in counts) and sorted(counts) == counts, g["groupName"]
    for params, _ in _pod_templates(cluster):
        # KubeRay passes rayStartParams to `ray start` as strings
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in params.items())


def test_raycluster_pods_are_scraped_and_authenticated(
        kuberay: dict[str, dict[str, Any]]) -> None:
    for params, template in _pod_templates(kuberay["RayCluster"]):
        notes = template["metadata"]["annotations"]
        assert notes["prometheus.io/scrape"] == "true"
        assert notes["prometheus.io/port"] == params["metrics-export-port"]
        assert notes["prometheus.io/path"] == "/metrics"
        (container,) = template["spec"]["containers"]
        assert container["image"].endswith(":0.1.0")
        ports = {p["containerPort"] for p in container["ports"]}
        assert int(params["metrics-export-port"]) in ports
        env = {e["name"]: e for e in container["env"]}
        dsn = env["DREAM_MEMORY_POSTGRES_DSN"]["valueFrom"]["secretKeyRef"]
        assert dsn == {"name": "dream-memory-postgres", "key": "dsn"}
        assert env["DREAM_MEMORY_BACKEND"]["value"] == "postgres"
        assert env["DREAM_MEMORY_METRICS"]["value"] == "ray"
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        token = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert token == {"name": "dream-memory-ray-token", "key": "token"}
        res = container["resources"]
        for kind in ("cpu", "memory"):
            assert _quantity(str(res["requests"][kind])) <= _quantity(str(res["limits"][kind]))
    text = (KUBE / "raycluster.yaml").read_text(encoding="utf-8")
    assert "postgresql://" not in text and not re.search(r"(?i)password\s*[:=]\s*\S", text)


def test_rayjob_starts_the_system_on_the_memory_group(kuberay: dict[str, dict[str, Any]]
                                                      ) -> None:
    """The RayJob runs the ConfigMap's script on the head; the script starts the system
    with every actor on the group that offers its custom resource."""
    import ast
    import inspect

    from dream_memory_actor import runtime

    cluster, job, config = kuberay["RayCluster"], kuberay["RayJob"], kuberay["ConfigMap"]
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": cluster["metadata"]["name"]}
    script_path = job["spec"]["entrypoint"].split()[-1]
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    mount = next(m for m in head["containers"][0]["volumeMounts"]
                 if script_path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in head["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == config["metadata"]["name"]
    source = config["data"][script_path.rsplit("/", 1)[1]]
    tree = ast.parse(source)  # it compiles
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and n.module == "dream_memory_actor.runtime" for a in n.names}
    assert imported and imported <= set(runtime.__all__)
    start = next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "start")
    inspect.signature(runtime.MemorySystem.start).bind(
        None, **{k.arg: None for k in start.keywords if k.arg})  # every keyword exists
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module([n for n in tree.body if isinstance(n, ast.Assign)
                             and "GROUP" in ast.unparse(n)], []), "start", "exec"), namespace)
    wanted = set(namespace["ON_MEMORY_GROUP"]["resources"])
    memory = next(g for g in cluster["spec"]["workerGroupSpecs"] if g["groupName"] == "memory")
    offered = json.loads(json.loads(memory["rayStartParams"]["resources"]))
    assert wanted <= set(offered)
    for g in cluster["spec"]["workerGroupSpecs"]:
        if g["groupName"] != "memory":
            assert "resources" not in g["rayStartParams"] or not (
                wanted & set(json.loads(json.loads(g["rayStartParams"]["resources"]))))
    assert "dream_memory" not in str(cluster["spec"]["headGroupSpec"]["rayStartParams"])


def test_kubernetes_secrets_example_matches_the_references(
        kuberay: dict[str, dict[str, Any]]) -> None:
    secrets = {d["metadata"]["name"]: d for d in _kube_docs("secrets.example.yaml")}
    refs: set[tuple[str, str]] = set()
    for _, template in _pod_templates(kuberay["RayCluster"]):
        for e in template["spec"]["containers"][0]["env"]:
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                refs.add((ref["name"], ref["key"]))
    assert refs == {(name, key) for name, s in secrets.items() for key in s["stringData"]}
    for s in secrets.values():
        assert s["kind"] == "Secret" and all(v == "" for v in s["stringData"].values())
