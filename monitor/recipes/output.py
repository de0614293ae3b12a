"""Deployments to the config shape (`{"deployments": [...]}`), as YAML or JSON."""

from __future__ import annotations

import json
from typing import Any

import yaml

from monitor.config import Deployment

# The keys every imported deployment shows, even when unset (null says "fill me in").
SHOWN = ("name", "model", "hardware", "cards", "mode", "dataset", "input_tokens", "output_tokens",
         "prefix_cache_hit", "image_inputs", "quantization", "tpot_target_seconds", "ttft_target_seconds")
ALWAYS = {"name", "model", "hardware", "cards", "mode", "input_tokens", "output_tokens", "prefix_cache_hit",
          "tpot_target_seconds", "ttft_target_seconds", "quantization"}
TAIL = ("buckets", "baseline", "targets", "launch", "warnings")


def deployment_dict(d: Deployment) -> dict[str, Any]:
    data = d.model_dump(mode="json", exclude_none=True)
    # Targets show what is set; a default (e.g. follow_redirects: false) is noise in every entry.
    data["targets"] = [t.model_dump(mode="json", exclude_none=True, exclude_defaults=True) for t in d.targets]
    out: dict[str, Any] = {}
    for key in SHOWN:
        if key in data or key in ALWAYS:
            out[key] = data.get(key)
    for key, value in data.items():  # anything else set off its default (objective, labels, …)
        if key not in SHOWN and key not in TAIL and value != Deployment.model_fields[key].get_default(
                call_default_factory=True):
            out[key] = value
    for key in TAIL:
        if key in ("targets", "launch", "warnings") or data.get(key):
            out[key] = data.get(key, [] if key != "launch" else {})
    return out


def config_dict(deployments: list[Deployment]) -> dict[str, Any]:
    return {"deployments": [deployment_dict(d) for d in deployments]}


class _Dumper(yaml.SafeDumper):
    pass


def _short_lists(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    # Bucket lists and flag values read best on one line.
    flow = bool(data) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _short_lists)


def render(deployments: list[Deployment], fmt: str = "yaml", header: str | None = None) -> str:
    data = config_dict(deployments)
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110)
    if header:
        body = "".join(f"# {ln}".rstrip() + "\n" for ln in header.splitlines()) + body
    return body
