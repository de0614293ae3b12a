"""bench/RESULTS.md, the hot-path figure and the figures the docs quote cannot go stale unseen (issue #33 item 4)."""

from __future__ import annotations

import pytest

from bench import hot_path, provenance, quotes


def test_every_results_section_is_newer_than_the_code_it_measures():
    problems = provenance.stale(provenance.ROOT.joinpath("bench", "RESULTS.md").read_text(encoding="utf-8"))
    assert not problems, "bench/RESULTS.md is stale (`make bench` on the final commit):\n" + "\n".join(problems)


def test_the_hot_path_figure_is_newer_than_the_code_it_measures():
    figure = hot_path.committed()
    later = provenance.changes_since(figure["commit"], provenance.MEASURES["hot_path"])
    assert not later, (f"bench/hot_path.json was measured at {figure['commit']}; later changes to the hot path: "
                       f"{later} (`python -m bench.hot_path --write`)")


def test_every_figure_the_docs_quote_is_the_one_in_results():
    assert not quotes.drifted()


SAMPLE = """# Benchmark results

## Goals

| goal | measured | target | verdict |
|------|----------|--------|---------|
| 1. CPU per scrape vs Prometheus 2.42, fixture x 32 DP (anchor) | 0.25x [0.2–0.3] | <= 0.3x | met |

## 1. CPU per scrape

Measured at commit {commit} (2026-12-06 14:30 UTC), on monitor/parse, monitor/scrape, monitor/slo.

text

## How to read this
"""


def test_a_section_measured_before_a_change_to_its_code_is_stale():
    first = provenance._git("rev-list", "--max-parents=0", "HEAD").splitlines()[0]
    head = provenance._git("rev-parse", "HEAD")
    assert provenance.stale(SAMPLE.format(commit=head)) == []
    old = provenance.stale(SAMPLE.format(commit=first[:12]))
    assert len(old) == 1 and "later commit(s) changed the code it measures" in old[0]
    assert "uncommitted" in provenance.stale(SAMPLE.format(commit=head[:12] + "-dirty"))[0]
    assert "no 'Measured at commit" in provenance.stale(SAMPLE.replace("Measured at", "Run at"))[0]


def test_a_quote_is_rewritten_from_the_goal_line_and_an_unknown_key_is_an_error():
    table = quotes.goals(SAMPLE)
    doc = "CPU <!-- results: 1. CPU per scrape vs Prometheus 2.42 -->old<!-- /results --> of Prometheus's"
    assert quotes.rendered(doc, table) == doc.replace("old", "0.25x [0.2–0.3]")
    with pytest.raises(KeyError):
        quotes.rendered("<!-- results: 9. nothing -->x<!-- /results -->", table)
