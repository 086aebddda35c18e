"""The cluster deployment checked without a cluster: deploy/serve.yaml and the KubeRay
RayService (deploy/kuberay/rayservice.yaml) against Ray Serve's own config schema and
Kubernetes' own pod schema (kubernetes-validate), the application they name built, and the
Dockerfile's ``cluster`` stage. tests/server/test_server_cluster.py runs the application."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from ray.serve import Application
from ray.serve.schema import ServeDeploySchema

from server.cluster import Ingress
from server.settings import Settings
from tests.dockerfile import chain, parse

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
SERVE_CONFIG = ROOT / "deploy" / "serve.yaml"
RAYSERVICE = ROOT / "deploy" / "kuberay" / "rayservice.yaml"
KUBERNETES = kubernetes_validate.latest_version()


def _serve_config(text: str) -> ServeDeploySchema:
    return ServeDeploySchema.model_validate(yaml.safe_load(text))


def _rayservice() -> dict[str, Any]:
    return yaml.safe_load(RAYSERVICE.read_text())


def _pod_templates(svc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cluster = svc["spec"]["rayClusterConfig"]
    templates = {"head": cluster["headGroupSpec"]["template"]}
    for group in cluster["workerGroupSpecs"]:
        templates[group["groupName"]] = group["template"]
    return templates


def _cpus(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def _ray_pin() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [d for d in deps["optional-dependencies"]["cluster"] if d.startswith("ray[serve]==")]
    assert pins, "ray[serve] is not pinned in the cluster extra"
    return pins[0].split("==")[1]


def test_serve_config_is_valid_and_its_application_builds():
    config = _serve_config(SERVE_CONFIG.read_text())
    # a local run (make serve-cluster) listens on loopback only: as Ray reads the file, whose
    # host would otherwise default to every interface
    assert config.http_options.host == "127.0.0.1"
    (app,) = config.applications
    module, name = app.import_path.split(":")
    built = getattr(importlib.import_module(module), name)(app.args)
    assert isinstance(built, Application)
    assert app.route_prefix == "/"


def test_rayservice_pod_templates_are_valid_kubernetes():
    for name, template in _pod_templates(_rayservice()).items():
        pod_template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"lsmt-{name}"},
            "template": template,
        }
        try:
            kubernetes_validate.validate(pod_template, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {exc.message} at {list(exc.path)}")


def test_rayservice_carries_the_application_of_serve_yaml():
    svc = _rayservice()
    assert (svc["apiVersion"], svc["kind"]) == ("ray.io/v1", "RayService")
    local = _serve_config(SERVE_CONFIG.read_text())
    remote = _serve_config(svc["spec"]["serveConfigV2"])
    (app,), (ref,) = remote.applications, local.applications
    assert (app.name, app.import_path, app.route_prefix) == (ref.name, ref.import_path, "/")
    assert set(app.args) == set(ref.args)
    # Serve's proxies listen on every pod's address, on the port the image exposes.
    assert remote.http_options.host == "0.0.0.0"
    assert remote.http_options.port == local.http_options.port
    assert svc["spec"]["rayClusterConfig"]["rayVersion"] == _ray_pin()


def test_rayservice_translators_fit_the_workers_and_the_head_takes_none():
    svc = _rayservice()
    cluster = svc["spec"]["rayClusterConfig"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    # KubeRay gives Ray a pod's CPU limit as its CPUs.
    worker_cpus = 0.0
    for group in cluster["workerGroupSpecs"]:
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        worker_cpus += group["replicas"] * _cpus(limits["cpu"])
    (app,) = _serve_config(svc["spec"]["serveConfigV2"]).applications
    ingress_cpus = Ingress.ray_actor_options["num_cpus"]
    assert app.args["translators"] * app.args["translator_cpus"] + ingress_cpus <= worker_cpus


def test_rayservice_environment_names_server_settings():
    fields = set(Settings.model_fields)
    for name, template in _pod_templates(_rayservice()).items():
        for container in template["spec"]["containers"]:
            names = [e["name"] for e in container.get("env", [])]
            assert names, f"{name}: no LSMT_ settings"
            for env in names:
                assert env.startswith("LSMT_") and env[5:].lower() in fields, (name, env)


def test_cluster_image_stage():
    stages = parse(ROOT / "Dockerfile")
    names = [s.name for s in chain(stages, "cluster")]
    assert names[0] == "base" and names[-1] == "cluster"
    build = " ".join(i.args for i in stages["cluster-build"].all("RUN"))
    assert "[serve,postgres,cluster]" in build
    assert stages["cluster-build"].base == "server-build"
    cluster = stages["cluster"]
    runs = " ".join(i.args for i in cluster.all("RUN"))
    assert "/opt/venv/bin/ray" in runs and "/usr/local/bin" in runs  # KubeRay's login shell
    env: dict[str, str] = {}
    for ins in cluster.all("ENV"):
        env.update(ins.env())
    # the image listens on every interface: its copy of the config names 0.0.0.0, made by the
    # stage's own substitution applied to the file as committed
    (sed,) = re.findall(r"sed -i '(s/.+?/.+?/)' deploy/serve\.yaml", runs)
    _, pattern, replacement, _ = sed.split("/")
    image_config = re.sub(pattern, replacement, SERVE_CONFIG.read_text(), flags=re.M)
    assert _serve_config(image_config).http_options.host == "0.0.0.0"
    copied = {i.args.split()[0] for i in cluster.all("COPY") if "from" not in i.flags}
    assert {"models/default", "deploy/serve.yaml"} <= copied
    assert env["LSMT_DEFAULT_BUNDLE_DIR"] == "/app/models/default"
    port = int(cluster.last("EXPOSE").args)
    assert port == _serve_config(SERVE_CONFIG.read_text()).http_options.port
    assert cluster.last("CMD").json_or_shell() == ["serve", "run", "deploy/serve.yaml"]
    uid = cluster.last("USER").args.split(":")[0]
    assert uid.isdigit() and int(uid) != 0
