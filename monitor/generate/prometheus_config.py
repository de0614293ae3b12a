"""prometheus.yml: one scrape job per role (targets labelled deployment/role), the sidecar job,
rule_files and alerting.

Two SGLang naming traps are undone at scrape time so rules can keep the canonical names:
prometheus_client >= 0.23 answers Prometheus' OpenMetrics Accept header with `sglang_...` sample
names (client_python#1177), and the router's `/engine_metrics` renames `sglang:` to `sglang_`
and prints integer bucket bounds as `le="1"` where SGLang writes `le="1.0"`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import parse_qs, urlsplit

from monitor.config import Config, Target
from monitor.conventions import names
from monitor.conventions.names import GATEWAY_SOURCES
from monitor.escaping import comment, yaml_text
from monitor.generate.options import Options
from monitor.redaction import redact, secret_param
from monitor.slo_plan import SCRAPED_SOURCES

JOB_BY_SOURCE = {"router": "sglang-router", "router-engine-metrics": "sglang-router-engine-metrics",
                 "npu-exporter": "npu-exporter", "dcgm": "dcgm"}

# Restore `sglang:` names, then `le="1.0"` on SGLang buckets (regexes are anchored by Prometheus).
METRIC_RELABEL = [
    {"source_labels": ["__name__"], "regex": "sglang_(.+)", "target_label": "__name__", "replacement": "sglang:${1}"},
    {"source_labels": ["__name__", "le"], "regex": "sglang:.+_bucket;([0-9]+)", "target_label": "le",
     "replacement": "${1}.0"},
]


# --histograms nhcb: SGLang's and its gateway's classic histograms become native histograms with custom
# buckets at scrape time (Prometheus 3). The classic text format, because prometheus_client >= 0.23 asked
# for OpenMetrics without `escaping=allow-utf-8` (a Prometheus with legacy name validation or underscore
# escaping) writes `# TYPE sglang:x histogram` over `sglang_x_bucket` samples: the names differ, Prometheus
# does not see a histogram and silently stores the classic series (measured on 3.16, docs/prometheus3.md).
NHCB_SCRAPE = {"convert_classic_histograms_to_nhcb": True, "scrape_protocols": ["PrometheusText0.0.4"]}


def job_name(target: Target) -> str:
    return f"sglang-{target.role}" if target.source == "sglang" else JOB_BY_SOURCE[str(target.source)]


def _address(target: Target) -> tuple[str, str, str, dict[str, list[str]], list[str]]:
    """host:port, scheme, path, the query parameters to write, and what is left out as a secret: a
    password in the URL (a Prometheus target address has no userinfo) and credential-named parameters."""
    parts = urlsplit(target.url or "")
    userinfo, at, address = parts.netloc.rpartition("@")
    params = parse_qs(parts.query)
    secret = sorted(k for k in params if secret_param(k))
    left_out = (["its URL's user:password (add `basic_auth: {username: ..., password_file: ...}`)"] if at else [])
    left_out += [f"query parameter {k} (add `params: {{{k}: [...]}}`)" for k in secret]
    return address, parts.scheme or "http", parts.path or "/metrics", \
        {k: v for k, v in params.items() if k not in secret}, left_out


def sidecar_address(config: Config) -> str:
    host = config.sidecar.listen_host
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{config.sidecar.listen_port}"


def _jobs(config: Config) -> dict[str, dict[str, Any]]:
    """job name -> {static: {(dep, role, scheme, path, node, gateway): [addresses]}, skipped: [notes], params}."""
    jobs: dict[str, dict[str, Any]] = defaultdict(lambda: {"static": defaultdict(list), "skipped": [], "params": {}})
    for dep in config.deployments:
        for target in dep.targets:
            if target.source not in SCRAPED_SOURCES:
                continue  # npu-smi, nvml and request logs are read by the sidecar, not Prometheus
            job = jobs[job_name(target)]
            if target.has_placeholder:
                job["skipped"].append(f"{dep.name} {target.role}: {redact(target.url)} has a placeholder; fill it in the "
                                      "config and regenerate")
                continue
            address, scheme, path, params, left_out = _address(target)
            if params:
                job["params"] = params
            # A gateway's targets say which version it is (dashboards and queries can tell them apart).
            gateway = dep.gateway if target.source in GATEWAY_SOURCES else ""
            key = (dep.name, target.role, scheme, path, target.node or "", gateway)
            if address not in job["static"][key]:
                job["static"][key].append(address)
            if target.bearer_token:
                job["skipped"].append(f"{dep.name} {target.role}: {redact(target.url)} needs a bearer token: add "
                                      "`authorization: {credentials_file: ...}` to this job (secrets are not written here)")
            for what in left_out:
                job["skipped"].append(f"{dep.name} {target.role}: {redact(target.url)} needs {what} in this job "
                                      "(secrets are not written here)")
    return jobs


def _job_yaml(name: str, job: dict[str, Any], opts: Options) -> str:
    statics = []
    for (dep, role, scheme, path, node, gateway), addresses in sorted(job["static"].items()):
        labels = {"deployment": dep, "role": role}
        if node:
            labels["node"] = node
        if gateway:
            labels["gateway"] = gateway
        if path != "/metrics":
            labels["__metrics_path__"] = path
        if scheme != "http":
            labels["__scheme__"] = scheme
        statics.append({"targets": sorted(addresses), "labels": labels})
    body: dict[str, Any] = {"job_name": name, "honor_labels": False}
    if job["params"]:
        body["params"] = job["params"]
    if name.startswith("sglang-"):
        if opts.nhcb:
            body.update(NHCB_SCRAPE)
        body["metric_relabel_configs"] = METRIC_RELABEL
    body["static_configs"] = statics
    text = yaml_text([body])
    notes = "".join(f"  # not scraped: {comment(n)}\n" for n in job["skipped"])
    return "".join("  " + line + "\n" for line in text.splitlines()) + notes


def prometheus_yml(config: Config, opts: Options, rule_globs: list[str]) -> str:
    interval = opts.scrape_interval
    head = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval if opts.scaled else "10s",
                   "evaluation_interval": interval},
        "rule_files": rule_globs,
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [opts.alertmanager]}]}]},
    }
    scale = (f"# --time-scale {opts.time_scale:g}: every rule window, `for` and the intervals below are divided "
             f"by {opts.time_scale:g}.\n" if opts.scaled else "")
    header = (f"# Generated by `slo-monitor generate` from {comment(opts.config_name)}; do not edit.\n{scale}"
              "# Targets are labelled {deployment, role} (a gateway's also {gateway}: smg-1.13 or sglang-router-0.3.2);\n"
              "# rules and dashboards select on those labels.\n"
              "# metric_relabel_configs restore `sglang:` names that prometheus_client >= 0.23 (and the router's\n"
              "# /engine_metrics) rewrite to `sglang_`, and SGLang's `le=\"1.0\"` spelling of integer bounds.\n")
    if opts.nhcb:
        header += ("# --histograms nhcb (Prometheus 3): the sglang-* jobs convert classic histograms into native\n"
                   "# histograms with custom buckets (no _bucket/_sum/_count series are stored), over the classic text\n"
                   "# format: prometheus_client's OpenMetrics answer can name a family differently from its samples.\n")
    sidecar = {"job_name": names.SIDECAR_JOB, "static_configs": [
        {"targets": [sidecar_address(config)], "labels": {"role": "sidecar"}}]}
    jobs = _jobs(config)
    out = header + yaml_text(head) + "scrape_configs:\n"
    out += "".join("  " + line + "\n" for line in yaml_text([sidecar]).splitlines())
    for name in sorted(jobs):
        out += _job_yaml(name, jobs[name], opts)
    return out
