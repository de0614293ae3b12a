"""What each target's scrapes read (issue #33): buckets only where a target or a reader needs them, means from
_sum/_count elsewhere, exactly as the full read gives them; a recording made under another read carries over."""

from __future__ import annotations

import math

from bench.expositions import fixture_text, replicate
from monitor.config import parse_config
from monitor.conventions.slis import SLI_BY_KEY, SLI_FAMILIES
from monitor.feeds import sli_reading, target_wanted
from monitor.parse.blocks import parse_grouped
from monitor.parse.exposition import NO_LIMITS, full_scan, parse
from monitor.parse.families import MEAN_ONLY_EDGES, engine_wanted
from monitor.scrape.loop import Scraper
from monitor.slo.engine import DeploymentEngine
from monitor.slo.histogram import mean
from tests.slo.helpers import histogram_lines


def deployment(**targets_seconds):
    cfg = parse_config({"deployments": [{
        "name": "d", "mode": "pd-disaggregated", **{f"{k}_target_seconds": v for k, v in targets_seconds.items()},
        "targets": [{"role": "prefill", "url": "http://127.0.0.1:9001/metrics"},
                    {"role": "decode", "url": "http://127.0.0.1:9002/metrics"},
                    {"role": "router", "source": "router-engine-metrics", "url": "http://127.0.0.1:9003/engine_metrics"}]}]})
    return cfg.deployments[0]


def buckets_read(wanted):
    return {sli for sli, fam in SLI_FAMILIES.items() if fam + "_bucket" in wanted}


def test_a_target_reads_buckets_only_of_the_slis_with_a_target_and_the_e2e_the_analyzer_reads():
    dep = deployment(tpot=0.1)
    prefill, decode, merged = dep.targets
    assert buckets_read(target_wanted(dep, decode)) == {"tpot", "e2e"}
    assert buckets_read(target_wanted(dep, prefill)) == set()  # no SLI's events count on a PD prefill server
    wanted = target_wanted(dep, decode)
    for sli in ("ttft", "itl"):  # means only: the analyzer's decode speed, the leading warning
        fam = SLI_FAMILIES[sli]
        assert {fam + "_sum", fam + "_count"} <= wanted and sli_reading(dep, sli) == "mean"
    queue = SLI_FAMILIES["queue_time"]
    assert queue + "_sum" in target_wanted(dep, prefill) and queue + "_sum" not in wanted  # admitted on prefill
    assert "sglang:per_stage_req_latency_seconds_sum" in target_wanted(dep, prefill)
    # A router's merge carries workers of every role: it reads what any of them needs.
    assert target_wanted(dep, merged) >= target_wanted(dep, prefill) | target_wanted(dep, decode)
    assert buckets_read(target_wanted(deployment(tpot=0.1, ttft=2.0, queue_time=1.0), prefill)) == {"queue_time"}
    assert all(w <= engine_wanted() for w in (target_wanted(dep, t) for t in dep.targets))


def test_a_config_reload_recomputes_what_each_target_reads():
    before = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.1,
                                            "targets": [{"role": "server", "url": "http://127.0.0.1:9/metrics"}]}]})
    after = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.1, "ttft_target_seconds": 2.0,
                                           "targets": [{"role": "server", "url": "http://127.0.0.1:9/metrics"}]}]})

    class Sink:
        def apply(self, result): ...

        def snapshot(self, deployment, ts, elapsed=None): ...

    key = ("d", before.deployments[0].targets[0].id)
    assert "ttft" not in buckets_read(Scraper(before, Sink()).wanted[key])
    assert "ttft" in buckets_read(Scraper(after, Sink()).wanted[key])


def test_the_read_of_a_few_names_of_a_big_block_is_the_full_scans():
    body = replicate(fixture_text(), 32).encode()
    dep = deployment(tpot=0.1)
    for target in dep.targets:
        wanted = target_wanted(dep, target)
        grouped = parse_grouped(body, wanted, "", NO_LIMITS)
        assert grouped is not None
        assert sorted(grouped.selected) == sorted(full_scan(body, wanted, count_families=False).selected)
    # A line of another family inside a block read for its means is not lost: the text is not grouped.
    lines = body.decode().split("\n")
    at = next(i for i, ln in enumerate(lines) if ln.startswith("sglang:queue_time_seconds_bucket"))
    running = next(i for i, ln in enumerate(lines) if ln.startswith("sglang:num_running_reqs{"))
    moved = lines[:]
    moved.insert(at, moved.pop(running))
    text = "\n".join(moved).encode()
    wanted = target_wanted(dep, dep.targets[0])
    assert parse_grouped(text, wanted, "", NO_LIMITS) is None
    assert sorted(parse(text, wanted, count_families=False).selected) == sorted(
        full_scan(body, wanted, count_families=False).selected)


def _itl(tokens: list[float], labels: str = 'engine_type="unified",model_name="m"') -> str:
    lines = histogram_lines(SLI_FAMILIES["itl"], list(SLI_BY_KEY["itl"].buckets), tokens, labels)
    return "\n".join(lines) + "\n"


def test_a_mean_read_from_sum_and_count_is_the_full_reads_mean_and_survives_a_restart():
    cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.1, "targets": [
        {"role": "server", "url": "http://127.0.0.1:9/metrics"}]}]})
    dep = cfg.deployments[0]
    (srv,) = dep.targets
    means, whole = DeploymentEngine(dep), DeploymentEngine(dep.model_copy(update={"itl_target_seconds": 0.05}))
    feed = [(0.0, [0.02] * 100), (10.0, [0.02] * 100 + [0.04] * 50),
            (20.0, [0.06] * 30)]  # the server restarted: its counts dropped
    for t, tokens in feed:
        for eng in (means, whole):
            eng.observe(srv, parse(_itl(tokens), target_wanted(eng.deployment, srv)), t)
            eng.snapshot(t)
    a, b = means.store.latest().hists["itl"], whole.store.latest().hists["itl"]
    assert a.edges == MEAN_ONLY_EDGES and len(b.edges) > 2
    assert a.count == b.count == 80 and math.isclose(mean(a), mean(b))  # 50 + 30 since the first scrape
    assert means.resets == whole.resets == {srv.id: 1}


def test_a_recording_made_under_another_read_carries_over_means_and_restarts_a_distribution():
    cfg = parse_config({"deployments": [{"name": "d", "tpot_target_seconds": 0.1, "targets": [
        {"role": "server", "url": "http://127.0.0.1:9/metrics"}]}]})
    dep = cfg.deployments[0]
    (srv,) = dep.targets
    whole_dep = dep.model_copy(update={"itl_target_seconds": 0.05})
    old = DeploymentEngine(whole_dep)  # recorded while ITL had a target: whole
    for t, n in ((0.0, 100), (10.0, 150)):
        old.observe(srv, parse(_itl([0.02] * n), target_wanted(whole_dep, srv)), t)
        old.snapshot(t)
    now = DeploymentEngine(dep)  # restarted without it: its mean carries on exactly
    assert now.restore(list(old.store.snapshots()), old.book) == 2 and not now.restore_notes
    now.observe(srv, parse(_itl([0.02] * 150 + [0.08] * 50), target_wanted(dep, srv)), 20.0)
    now.snapshot(20.0)
    snaps = list(now.store.snapshots())
    assert all(s.hists["itl"].edges == MEAN_ONLY_EDGES for s in snaps)
    assert snaps[-1].hists["itl"].count - snaps[-2].hists["itl"].count == 50
    back = DeploymentEngine(whole_dep)  # and back: the means cannot give a distribution; it restarts, said
    back.restore(snaps, now.book)
    assert back.restore_notes and "itl" in back.restore_notes[0]
    assert all("itl" not in s.hists for s in back.store.snapshots())
    back.observe(srv, parse(_itl([0.02] * 150 + [0.08] * 60), target_wanted(whole_dep, srv)), 30.0)
    back.snapshot(30.0)
    back.observe(srv, parse(_itl([0.02] * 150 + [0.08] * 70), target_wanted(whole_dep, srv)), 40.0)
    back.snapshot(40.0)
    w = back.state(40.0).slis["itl"].windows["5m"]
    assert w.events == 10 and w.good_ratio == 0.0  # counted from the first scrape after the start, not before
