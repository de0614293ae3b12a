"""docker-compose.yml, checked offline: pinned images, loopback ports, generated files mounted, one netns."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml

from monitor.commands.generate import DEFAULT_CONFIG
from monitor.config import load_config
from monitor.emulate.topology import localize
from monitor.generate.build import generate
from monitor.generate.options import Options
from monitor.generate.provisioning import DASHBOARD_PATH
from monitor.version import __version__
from tests.deploy.helpers import (
    ROOT,
    bind_mounts,
    compose,
    compose_raw,
    dockerfile_instructions,
    exec_form,
    host_path,
    repo_relative,
)

MONITORING = ("prometheus", "alertmanager", "grafana")
NETNS_OWNER = "prometheus"
PINNED = re.compile(r"^[\w.\-/]+:v?\d+\.\d+\.\d+[\w.\-]*$")
# Healthcheck keys docker-compose v1.29 (the compose 3.9 schema) accepts; start_interval is not one.
V1_HEALTHCHECK_KEYS = {"test", "interval", "timeout", "retries", "start_period", "disable"}


@pytest.fixture(scope="module")
def services() -> dict:
    return compose()["services"]


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    """What `slo-monitor generate` writes for the config the sidecar mounts by default."""
    return generate(load_config(ROOT / DEFAULT_CONFIG), Options(config_name=DEFAULT_CONFIG))


def _flag(service: dict, name: str) -> str:
    values = [a.split("=", 1)[1] for a in service["command"] if a.startswith(f"--{name}=")]
    assert len(values) == 1, f"{name} in {service['command']}"
    return values[0]


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_every_image_is_pinned_to_an_exact_version(services):
    for name, svc in services.items():
        image = svc.get("image")
        assert image, f"{name}: no image (a build needs an image: name:VERSION too)"
        assert not image.endswith(":latest") and PINNED.match(image), f"{name}: {image} is not pinned"
    for name in ("sidecar", "emulator"):
        assert services[name]["build"]["dockerfile"] == "Dockerfile"
        assert services[name]["image"] == f"sglang-slo-monitor:{__version__}"


def test_ports_are_published_on_loopback_only(services):
    published = 0
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert isinstance(port, str) and port.startswith("127.0.0.1:"), f"{name}: {port!r} not on 127.0.0.1"
            assert len(port.split(":")) == 3, f"{name}: {port!r} must be 127.0.0.1:HOST:CONTAINER"
            published += 1
    assert published


def test_services_share_one_network_namespace(services, generated):
    """The generated files address each other as 127.0.0.1; that holds only inside one namespace."""
    for name, svc in services.items():
        if name == NETNS_OWNER:
            assert "network_mode" not in svc
            continue
        assert svc.get("network_mode") == f"service:{NETNS_OWNER}", name
        assert "ports" not in svc, f"{name}: publish ports on {NETNS_OWNER}, which owns the namespace"
    container_ports = {int(p.rsplit(":", 1)[1]) for p in services[NETNS_OWNER]["ports"]}

    prom = yaml.safe_load(generated["alerts/prometheus.yml"])
    sidecar_job = next(j for j in prom["scrape_configs"] if j["job_name"] == "slo-monitor")
    sidecar_target = sidecar_job["static_configs"][0]["targets"][0]
    cmd = exec_form(dict(dockerfile_instructions())["CMD"])
    listen = cmd[cmd.index("--listen") + 1]
    assert sidecar_target.startswith("127.0.0.1:") and _port(sidecar_target) == _port(listen)
    am_target = prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"][0]
    assert am_target.startswith("127.0.0.1:")
    assert _port(am_target) == _port(_flag(services["alertmanager"], "web.listen-address"))
    ds = yaml.safe_load(generated["dashboards/provisioning/datasources/prometheus.yaml"])["datasources"][0]
    url = urlsplit(ds["url"])
    assert url.hostname == "127.0.0.1" and url.port == _port(_flag(services["prometheus"], "web.listen-address"))
    grafana_port = int(services["grafana"]["environment"]["GF_SERVER_HTTP_PORT"])
    assert {_port(listen), _port(am_target), url.port, grafana_port} <= container_ports


def test_sidecar_config_is_the_generators_default_and_the_cmd_path(services):
    (source, target, mode), *_ = bind_mounts(services["sidecar"])
    assert repo_relative(source) == DEFAULT_CONFIG  # the config the committed alerts/ are generated from
    assert mode == "ro"
    cmd = exec_form(dict(dockerfile_instructions())["CMD"])
    assert cmd[cmd.index("-c") + 1] == target
    assert "command" not in services["sidecar"]  # runs the image's CMD


def test_non_generated_mounts_exist(services):
    for name, svc in services.items():
        for source, _target, _mode in bind_mounts(svc):
            rel = repo_relative(source)
            if rel.startswith(("alerts", "dashboards")):
                continue
            assert host_path(source).is_file(), f"{name}: {source} does not exist"


def test_monitoring_mounts_are_generated_files(services, generated):
    """Prometheus, Alertmanager and Grafana mount only what `slo-monitor generate` writes."""
    for name in MONITORING:
        mounts = bind_mounts(services[name])
        assert mounts, name
        for source, _target, mode in mounts:
            rel = repo_relative(source)
            assert mode == "ro", f"{name}: {source} should be read-only"
            assert rel in generated or any(path.startswith(rel + "/") for path in generated), \
                f"{name}: {source} is not a file or directory `slo-monitor generate` writes"


def test_prometheus_reads_generated_config_and_rules(services, generated):
    prom = services["prometheus"]
    (source, target, _), = bind_mounts(prom)
    assert repo_relative(source) == "alerts"
    config_file = PurePosixPath(_flag(prom, "config.file"))
    assert config_file == PurePosixPath(target) / "prometheus.yml"
    rule_globs = yaml.safe_load(generated["alerts/prometheus.yml"])["rule_files"]
    rules = [p for p in generated if p.startswith("alerts/rules/")]
    assert rules
    for path in rules:
        assert any(PurePosixPath(path).relative_to("alerts").match(g) for g in rule_globs), path
    # The error budget covers the SLO period: Prometheus must keep at least that much history.
    retention = _flag(prom, "storage.tsdb.retention.time")
    assert retention.endswith("d") and int(retention[:-1]) >= 30


def test_alertmanager_and_grafana_mount_generated_routing_and_provisioning(services, generated):
    am = {repo_relative(s): t for s, t, _ in bind_mounts(services["alertmanager"])}
    assert am == {"alerts/alertmanager.yml": _flag(services["alertmanager"], "config.file")}
    assert _flag(services["alertmanager"], "cluster.listen-address") == ""  # no gossip port
    graf = {repo_relative(s): t for s, t, _ in bind_mounts(services["grafana"])}
    assert graf["dashboards/provisioning/datasources"] == "/etc/grafana/provisioning/datasources"
    assert graf["dashboards/provisioning/dashboards"] == "/etc/grafana/provisioning/dashboards"
    assert graf["dashboards"] == DASHBOARD_PATH
    provider = yaml.safe_load(generated["dashboards/provisioning/dashboards/slo-monitor.yaml"])["providers"][0]
    assert provider["options"]["path"] == DASHBOARD_PATH
    assert any(p.startswith("dashboards/") and p.endswith(".json") for p in generated)


def test_grafana_anonymous_access_is_off_by_default(services):
    env = services["grafana"]["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    assert env["GF_USERS_ALLOW_SIGN_UP"] == "false"


def test_generated_files_are_present_on_disk(services, generated):
    """Every generated file a monitoring service mounts is committed (`slo-monitor generate` writes them)."""
    missing, mounted = [], []
    for name in MONITORING:
        for source, _target, _mode in bind_mounts(services[name]):
            rel = repo_relative(source)
            wanted = [rel] if rel in generated else [p for p in generated if p.startswith(rel + "/")]
            mounted += wanted
            missing += [p for p in wanted if not (ROOT / p).is_file()]
    assert mounted, "no monitoring service mounts a generated file"
    assert not missing, f"run `slo-monitor generate -c {DEFAULT_CONFIG}` and commit: {', '.join(sorted(set(missing)))}"


def test_healthchecks_and_named_volumes(services):
    top = compose()["volumes"]
    for name, svc in services.items():
        hc = svc.get("healthcheck")
        assert hc and hc["test"][0] == "CMD", f"{name}: no exec-form healthcheck"
        assert set(hc) <= V1_HEALTHCHECK_KEYS, f"{name}: {set(hc) - V1_HEALTHCHECK_KEYS} (docker-compose v1 rejects)"
        for v in svc.get("volumes", []):
            source = v.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in top, f"{name}: volume {source} not declared"
    data_dirs = {"prometheus": "/prometheus", "alertmanager": "/alertmanager", "grafana": "/var/lib/grafana"}
    for name, path in data_dirs.items():
        assert any(v.split(":")[1] == path and v.split(":")[0] in top for v in services[name]["volumes"]), name


def test_demo_profile_emulates_exactly_the_demo_config(services):
    profiled = {name for name, svc in services.items() if svc.get("profiles")}
    assert profiled == {"emulator"} and services["emulator"]["profiles"] == ["demo"]
    cmd = services["emulator"]["command"]
    assert cmd[:2] == ["slo-monitor", "emulate"]
    (source, target, _), = bind_mounts(services["emulator"])
    assert cmd[cmd.index("-c") + 1] == target
    assert repo_relative(source) == "deploy/compose/demo.yaml"
    demo = load_config(host_path(source))
    base_port = int(cmd[cmd.index("--base-port") + 1])
    local = localize(demo, base_port)
    for dep, emulated in zip(demo.deployments, local.deployments):
        assert [(t.role, t.source, t.url, t.name) for t in dep.targets] == \
            [(t.role, t.source, t.url, t.name) for t in emulated.targets], dep.name
    health = services["emulator"]["healthcheck"]["test"][-1]
    assert f"127.0.0.1:{base_port}/control/state" in health
    # The sidecar's default config is not the demo's: the docs say to set SLO_MONITOR_CONFIG for the demo.
    raw = compose_raw()["services"]
    assert "${SLO_MONITOR_CONFIG:-" in raw["emulator"]["volumes"][0]
    assert "${SLO_MONITOR_CONFIG:-" in raw["sidecar"]["volumes"][0]


@pytest.mark.parametrize("profile", [None, "demo"])
def test_docker_compose_v1_validates_the_file(profile):
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose is not installed (apt-get install docker-compose gives v1.29)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLO_MONITOR_", "GRAFANA_", "PROMETHEUS_"))}
    args = [exe, "-f", "docker-compose.yml"] + (["--profile", profile] if profile else []) + ["config", "-q"]
    res = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
