"""Config reload planning: which deployments keep their windows, and what needs a restart."""

from __future__ import annotations

import pytest

from monitor.config import parse_config
from monitor.reload import ReloadRefused, plan_reload


def _config(sidecar=None, **targets):
    return parse_config({"sidecar": sidecar or {}, "deployments": [
        {"name": name, "tpot_target_seconds": tpot, "targets": []} for name, tpot in targets.items()]})


def test_unchanged_deployments_are_kept_and_the_rest_rebuilt_added_or_removed():
    plan = plan_reload(_config(a=0.04, b=0.04, gone=0.04), _config(a=0.04, b=0.05, new=0.04))
    assert (plan.kept, plan.rebuilt, plan.added, plan.removed) == (["a"], ["b"], ["new"], ["gone"])
    assert plan.summary() == "kept a; rebuilt b; added new; removed gone"


def test_settings_read_at_runtime_may_change():
    plan = plan_reload(_config(a=0.04), _config({"scrape_interval_seconds": 10, "api_bearer_token": "t"}, a=0.04))
    assert plan.kept == ["a"]


@pytest.mark.parametrize("setting, value", [("listen_port", 9999), ("recording_path", "/tmp/other.sqlite"),
                                            ("otlp_endpoint", "http://127.0.0.1:4318/v1/metrics")])
def test_a_setting_bound_at_start_refuses_the_reload_with_its_name(setting, value):
    with pytest.raises(ReloadRefused, match=rf"sidecar\.{setting} .* restart"):
        plan_reload(_config(a=0.04), _config({setting: value}, a=0.04))
