"""deploy/sidecar/: YAML that parses, and names, labels and ports that agree with each other,
with the image's CMD, and with the generated PodMonitor/ServiceMonitor (deploy/kubernetes/)."""

from __future__ import annotations

import pytest
import yaml

from monitor.config import parse_config
from monitor.generate.kubernetes import pod_monitor, service_monitor
from monitor.generate.options import Options
from tests.deploy.helpers import ROOT, dockerfile_instructions, exec_form

SIDECAR = ROOT / "deploy" / "sidecar"


def _doc(name: str) -> dict:
    docs = [d for d in yaml.safe_load_all((SIDECAR / name).read_text(encoding="utf-8")) if d]
    assert len(docs) == 1, name
    return docs[0]


@pytest.fixture(scope="module")
def objs() -> dict[str, dict]:
    kust = _doc("kustomization.yaml")
    out = {}
    for rel in kust["resources"]:
        doc = _doc(rel)
        assert {"apiVersion", "kind", "metadata"} <= set(doc), rel
        out[doc["kind"]] = doc
    assert set(out) == {"ConfigMap", "Deployment", "Service", "ServiceMonitor"}
    return out


def _containers(objs: dict) -> dict[str, dict]:
    return {c["name"]: c for c in objs["Deployment"]["spec"]["template"]["spec"]["containers"]}


def test_every_file_is_listed_in_the_kustomization(objs):
    listed = set(_doc("kustomization.yaml")["resources"])
    assert listed == {p.name for p in SIDECAR.glob("*.yaml")} - {"kustomization.yaml"}


def test_sidecar_container_mounts_the_configmap_where_the_cmd_reads_it(objs):
    cmd = exec_form(dict(dockerfile_instructions())["CMD"])
    config_path = cmd[cmd.index("-c") + 1]
    side = _containers(objs)["slo-monitor"]
    # The image's CMD, and --recording-reset: a damaged recording is moved aside, not a restart loop.
    assert "command" not in side and side["args"] == [*cmd, "--recording-reset"]
    spec = objs["Deployment"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mount = next(m for m in side["volumeMounts"] if config_path.startswith(m["mountPath"].rstrip("/") + "/"))
    cm_ref = volumes[mount["name"]]["configMap"]
    assert cm_ref["name"] == objs["ConfigMap"]["metadata"]["name"]
    key = config_path[len(mount["mountPath"].rstrip("/")) + 1:]
    assert {"key": key, "path": key} in cm_ref["items"]
    assert key in objs["ConfigMap"]["data"]


def test_probes_resources_and_security(objs):
    side = _containers(objs)["slo-monitor"]
    port_names = {p["name"]: p["containerPort"] for p in side["ports"]}
    cmd = exec_form(dict(dockerfile_instructions())["CMD"])
    assert port_names["metrics"] == int(cmd[cmd.index("--listen") + 1].rsplit(":", 1)[1])
    for probe in ("readinessProbe", "livenessProbe"):
        assert side[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert side["resources"]["requests"] and side["resources"]["limits"]
    sc = side["securityContext"]
    user = int(dict(dockerfile_instructions())["USER"].split(":")[0])
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == user and sc["readOnlyRootFilesystem"] is True
    sglang = _containers(objs)["sglang"]
    assert "--enable-metrics" in sglang["args"]


def test_service_selects_the_pod_and_exposes_the_named_port(objs):
    svc, dep = objs["Service"], objs["Deployment"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (port,) = svc["spec"]["ports"]
    assert port["name"] == "metrics" and port["targetPort"] == "metrics"


def test_servicemonitors_select_the_service(objs):
    svc_labels = objs["Service"]["metadata"]["labels"]
    generated = yaml.safe_load(service_monitor(Options()))
    for sm in (objs["ServiceMonitor"], generated):
        assert sm["spec"]["selector"]["matchLabels"].items() <= svc_labels.items()
        assert {e["port"] for e in sm["spec"]["endpoints"]} == {p["name"] for p in objs["Service"]["spec"]["ports"]}
    # Same job/role labels as the generated one: the generated self-alert selects job="slo-monitor".
    assert objs["ServiceMonitor"]["spec"]["endpoints"][0]["relabelings"] == \
        generated["spec"]["endpoints"][0]["relabelings"]


def test_generated_servicemonitor_finds_sidecars_outside_its_own_namespace(objs):
    generated = yaml.safe_load(service_monitor(Options()))
    # It lives in the monitoring namespace; the sidecar's Service lives with the workload.
    assert generated["metadata"]["namespace"] != objs["Service"]["metadata"].get("namespace", "sglang")
    assert generated["spec"]["namespaceSelector"] == {"any": True}


def test_pod_labels_and_sglang_port_match_the_generated_podmonitor_and_the_config(objs):
    pm = yaml.safe_load(pod_monitor(Options()))
    pod_labels = objs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    for expr in pm["spec"]["selector"]["matchExpressions"]:
        assert expr["operator"] == "Exists" and expr["key"] in pod_labels
    sglang_ports = {p["name"]: p["containerPort"] for p in _containers(objs)["sglang"]["ports"]}
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] in sglang_ports
    config = parse_config(yaml.safe_load(objs["ConfigMap"]["data"]["config.yaml"]))
    (dep,) = config.deployments
    assert dep.name == pod_labels["slo-monitor.sglang.io/deployment"]
    (target,) = dep.targets
    assert target.role == pod_labels["slo-monitor.sglang.io/role"]
    assert target.url == f"http://127.0.0.1:{sglang_ports['http']}/metrics"  # same pod: loopback
