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


# --- hostile configs: bounded work, one short error naming the file ------------------------------------------
def laughs(levels: int, under: str) -> str:
    """A "billion laughs" document: each level an alias list of nine of the level below (9**levels strings)."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\n{under}: *a{levels - 1}\n"


@pytest.mark.parametrize("under", ["mode", "apiVersion", "deployments"])
def test_alias_expansion_beyond_the_bound_is_refused_in_one_short_line_naming_the_file(tmp_path, under):
    """A 515-byte file with nine levels took 68 s and 8.3 GB (`repr` of the input in the error); five
    levels (59,049 strings) are enough to cross the bound."""
    p = write(tmp_path, laughs(5, under))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}: line 5:") and "aliases expand to more than 10,000 nodes" in msg
    assert "\n" not in msg and len(msg) < 300


def test_aliases_within_the_bound_still_load(tmp_path):
    text = GOOD.replace("targets:", "labels: &l {team: inference}\n    targets:") + "  - name: other\n    labels: *l\n"
    cfg = load_config(write(tmp_path, text))
    assert cfg.deployments[1].labels == {"team": "inference"}


def test_a_recursive_alias_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"line 2: alias \*d is inside what it refers to"):
        load_config(write(tmp_path, "deployments: &d\n  - *d\n"))


@pytest.mark.parametrize("text", ["[" * 1000 + "]" * 1000, "deployments:\n  - launch: " + "{a: " * 1000 + "1" + "}" * 1000])
def test_deep_nesting_is_one_line_not_a_recursion_error(tmp_path, text):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(err.value).startswith(f"{p}:") and "nested more than 64 levels deep" in str(err.value)


def test_an_integer_too_long_for_python_is_a_config_error_naming_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"line 2: an integer of 5,000 characters: refused"):
        load_config(write(tmp_path, "sidecar:\n  listen_port: " + "9" * 5000 + "\n"))


def test_a_deployment_name_is_bounded_by_what_a_file_name_can_hold(tmp_path):
    """A 10,000-character name ran, then `generate` died on "file name too long"."""
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, GOOD.replace("name: kimi-pd", "name: " + "k" * 10_000)))
    msg = str(err.value)
    assert "deployments[0]" in msg and "10,000 characters; a deployment name has 128 at most" in msg
    assert len(msg) < 400
    assert parse_config({"deployments": [{"name": "k" * 128}]}).deployments[0].name == "k" * 128


def targets(n: int) -> list[dict]:
    return [{"role": "server", "url": f"http://10.0.{i // 250}.{i % 250}:30000/metrics"} for i in range(n)]


def test_targets_per_deployment_are_bounded_before_each_is_validated():
    """100,000 targets in one deployment validated for 17 s, then the sidecar logged 100k "down" lines."""
    assert len(parse_config({"deployments": [{"name": "d", "targets": targets(1000)}]}).deployments[0].targets) == 1000
    with pytest.raises(ConfigError, match=r"deployments\[0\] \(d\): Value error, 1,001 targets; a deployment may "
                                          r"have 1,000 at most"):
        parse_config({"deployments": [{"name": "d", "targets": targets(1001)}]})


def test_deployments_and_targets_per_config_are_bounded():
    with pytest.raises(ConfigError, match=r"1,001 deployments; a config may have 1,000 at most"):
        parse_config({"deployments": [{"name": f"d{i}"} for i in range(1001)]})
    deps = [{"name": f"d{i}", "targets": targets(1000)} for i in range(11)]
    with pytest.raises(ConfigError, match=r"11,000 targets; a config may have 10,000 at most"):
        parse_config({"deployments": deps})


def test_errors_show_an_excerpt_of_the_input_and_at_most_twenty_lines():
    with pytest.raises(ConfigError) as err:
        parse_config({"deployments": [{"name": "d", "mode": "x" * 100_000}]}, "c.yaml")
    assert "got 'xxxx" in str(err.value) and "(100,000 characters)" in str(err.value) and len(str(err.value)) < 400
    bad = [{"name": f"d{i}", "cards": 0} for i in range(50)]
    with pytest.raises(ConfigError) as err:
        parse_config({"deployments": bad}, "c.yaml")
    lines = str(err.value).splitlines()
    assert lines[0] == "c.yaml: invalid config (50 errors)" and len(lines) == 22 and lines[-1] == "  ... and 30 more"


# --- values that go into HTTP headers ------------------------------------------------------------------------
@pytest.mark.parametrize("token, says", [
    ("s3cret\n", r"character 7 of 7 is a newline.*use `\|-`"),
    ("s3c ret", "character 4 of 7 is a space"),
    ("s3cr\u00e9t", "character 5 of 6 is U\\+00E9"),
    ("", "is empty"),
])
def test_a_bearer_token_must_be_header_safe_and_the_error_never_shows_it(tmp_path, token, says):
    """A YAML block scalar's trailing newline passed, then every scrape logged a 30-line traceback."""
    p = write(tmp_path, GOOD.replace('node: n1}', f'node: n1}}\n      - {{role: decode, url: "http://h:1/metrics", '
                                                 f'bearer_token: {json.dumps(token)}}}'))
    with pytest.raises(ConfigError, match=r"deployments\[0\] \(kimi-pd\)\.targets\[3\]\.bearer_token: Value error, "
                                          + says) as err:
        load_config(p)
    assert token.strip() == "" or token.strip() not in str(err.value)


def test_a_block_scalar_token_is_refused_and_a_stripped_one_loads(tmp_path):
    block = GOOD.replace("sidecar:\n", "sidecar:\n  api_bearer_token: |\n    s3cret\n")
    with pytest.raises(ConfigError, match=r"sidecar\.api_bearer_token: .*character 7 of 7 is a newline"):
        load_config(write(tmp_path, block))
    assert load_config(write(tmp_path, block.replace("|", "|-"))).sidecar.api_bearer_token == "s3cret"


@pytest.mark.parametrize("url", ["http://h:1/metrics\n", "http://h:1/me\ttrics", "http://h:1/\x00"])
def test_a_url_with_a_control_character_is_refused(url):
    with pytest.raises(ConfigError, match=r"targets\[0\]\.url: Value error, character \d+ of \d+ is"):
        parse_config({"deployments": [{"name": "d", "targets": [{"role": "server", "url": url}]}]})


def test_a_file_over_the_size_bound_or_not_utf8_is_refused_unread(tmp_path):
    p = tmp_path / "huge.yaml"
    p.write_bytes(b"# " + b"x" * (8 * 1024 * 1024) + b"\n")
    with pytest.raises(ConfigError, match=r"huge.yaml: more than 8 MiB: refused"):
        load_config(p)
    p.write_bytes(b"deployments: []\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"huge.yaml: not UTF-8 \(byte 21\)"):
        load_config(p)


def test_a_recording_full_resolution_shorter_than_the_windows_keep_every_snapshot_is_refused():
    with pytest.raises(ConfigError, match=r"sidecar.recording_full_resolution: .*must be at least 7m"):
        parse_config({"sidecar": {"recording_full_resolution": "5m"}})
    assert parse_config({"sidecar": {"recording_full_resolution": "7m"}}).sidecar.recording_full_resolution == "7m"
