"""Config loading: errors name the file, the field and what was expected."""

from __future__ import annotations

import json

import pytest

from monitor.config import ConfigError, load_config, parse_config

GOOD = """
sidecar:
  scrape_interval_seconds: 5
deployments:
  - name: kimi-pd
    mode: pd-disaggregated
    tpot_target_seconds: 0.1
    targets:
      - {role: prefill, url: "http://10.0.0.1:8000/metrics"}
      - {role: decode, url: "http://10.0.0.2:8001/metrics"}
      - {role: npu, command: ["npu-smi"], node: n1}
"""


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_good_config_loads_with_defaults(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    d = cfg.deployments[0]
    assert d.slis == ["tpot"] and d.objective == 0.99 and d.period_seconds == 30 * 86400
    assert [t.source for t in d.targets] == ["sglang", "sglang", "npu-smi"]
    assert cfg.sidecar.listen_host == "127.0.0.1"


def test_typo_names_file_field_and_deployment(tmp_path):
    p = write(tmp_path, GOOD.replace("tpot_target_seconds", "tpot_target_secs"))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    msg = str(err.value)
    assert str(p) in msg and "deployments[0] (kimi-pd).tpot_target_secs: unknown key (typo?)" in msg


def test_bad_mode_says_what_was_expected(tmp_path):
    with pytest.raises(ConfigError, match=r"mode: .*'pd-mixed' or 'pd-disaggregated'.*got 'pd'"):
        load_config(write(tmp_path, GOOD.replace("pd-disaggregated", "pd")))


def test_target_without_url_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match=r"targets\[0\].*needs `url`"):
        load_config(write(tmp_path, GOOD.replace('url: "http://10.0.0.1:8000/metrics"', "node: x")))


def test_duplicate_deployment_names_are_rejected():
    dep = {"name": "a", "targets": []}
    with pytest.raises(ConfigError, match="two deployments are named 'a'"):
        parse_config({"deployments": [dep, dep]})


def test_bad_yaml_names_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"line \d+ column \d+"):
        load_config(write(tmp_path, "deployments: [\n  {name: a\n"))


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")


def test_timeout_longer_than_interval_is_rejected():
    with pytest.raises(ConfigError, match="scrape_timeout_seconds"):
        parse_config({"sidecar": {"scrape_interval_seconds": 1, "scrape_timeout_seconds": 2}})


def test_placeholders_are_detected():
    cfg = parse_config({"deployments": [{"name": "a", "targets": [
        {"role": "server", "url": "http://<your node ip>:30000/metrics"}]}]})
    assert cfg.deployments[0].targets[0].has_placeholder


def test_bearer_token_is_not_in_repr():
    cfg = parse_config({"deployments": [{"name": "a", "targets": [
        {"role": "server", "url": "http://h:1/metrics", "bearer_token": "s3cret"}]}]})
    assert "s3cret" not in repr(cfg)


@pytest.mark.parametrize("field, value, says", [
    ("tpot_target_seconds", ".inf", "finite number"),
    ("ttft_target_seconds", ".nan", "finite number"),
    ("e2e_target_seconds", "-.inf", "finite number"),
])
def test_targets_must_be_finite_and_the_error_names_file_and_field(tmp_path, field, value, says):
    p = write(tmp_path, GOOD.replace("tpot_target_seconds: 0.1", f"tpot_target_seconds: 0.1\n    {field}: {value}"))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(p) in str(err.value) and f"deployments[0] (kimi-pd).{field}" in str(err.value)
    assert says in str(err.value)


def test_no_number_in_the_config_may_be_infinite(tmp_path):
    for text in (GOOD.replace("scrape_interval_seconds: 5", "scrape_interval_seconds: .inf"),
                 GOOD.replace("tpot_target_seconds: 0.1", "tpot_target_seconds: 0.1\n    buckets: {tpot: [0.1, .inf]}")):
        with pytest.raises(ConfigError, match="finite number"):
            load_config(write(tmp_path, text))


@pytest.mark.parametrize("period, ok", [
    ("0s", False), ("59m", False), ("1h", True), ("30d", True), ("365d", True), ("366d", False),
    ("100000000d", False),
])
def test_the_slo_period_is_between_an_hour_and_a_year(tmp_path, period, ok):
    text = GOOD.replace("tpot_target_seconds: 0.1", f"tpot_target_seconds: 0.1\n    period: {period}")
    if ok:
        assert load_config(write(tmp_path, text)).deployments[0].period == period
        return
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert "deployments[0] (kimi-pd).period" in str(err.value) and "between 1h and 365d" in str(err.value)


@pytest.mark.parametrize("name", ["kimi\n", "kimi\nx", "Kimi", "-kimi", "kimi pd"])
def test_a_deployment_name_must_be_a_slug_all_of_it(tmp_path, name):
    with pytest.raises(ConfigError, match=r"\.name: Value error, must be a slug"):
        parse_config({"deployments": [{"name": name}]}, "c.yaml")


@pytest.mark.parametrize("name", ["self", "accelerators"])
def test_a_deployment_may_not_take_the_name_of_the_sidecars_own_rule_files(name):
    """`self` would write alerts/rules/self.rules.yml, and one of the two sets of rules would be lost."""
    with pytest.raises(ConfigError, match=f"alerts/rules/{name}.rules.yml"):
        parse_config({"deployments": [{"name": name}]}, "c.yaml")


@pytest.mark.parametrize("name, says", [
    ("te am", "not a Prometheus label name"), ("team\n", "not a Prometheus label name"),
    ("1team", "not a Prometheus label name"), ("__name__", "reserved"), ("severity", "reserved"),
    ("deployment", "reserved"), ("alertname", "reserved"),
])
def test_deployment_label_names_are_checked_and_the_error_names_file_and_field(tmp_path, name, says):
    labels = f"labels: {{{json.dumps(name)}: x, team: inference}}"
    p = write(tmp_path, GOOD.replace("tpot_target_seconds: 0.1", f"tpot_target_seconds: 0.1\n    {labels}"))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(p) in str(err.value) and "deployments[0] (kimi-pd).labels" in str(err.value)
    assert says in str(err.value) and repr(name) in str(err.value)


def test_any_label_value_is_accepted():
    cfg = parse_config({"deployments": [{"name": "d", "labels": {"team": "{{", "owner": "{{ $value }}", "x": 'a"b\n'}}]})
    assert cfg.deployments[0].labels["team"] == "{{"
