"""The scrape hot path may not grow unseen (issue #33): parse + SLO update of the anchor exposition, as a ratio
to prometheus_client's parser on the same text in the same run, against the figure committed by `make bench`."""

from __future__ import annotations

import pytest

from bench import hot_path


# A ratio of two timings in one process still moves with what runs beside it (0.0109 in `make bench`, 0.0139 beside
# six suite workers, same code): `make test` runs it after the rest, on its own.
@pytest.mark.alone
def test_parse_and_update_of_the_anchor_stay_within_1_25x_of_the_committed_ratio():
    figure = hot_path.committed()
    got = hot_path.measure()
    for _ in range(2):  # up to two more looks before failing, the best kept: noise only ever adds to a round
        if got["ratio"] <= hot_path.LIMIT * figure["ratio"]:
            break
        again = hot_path.measure()
        got = again if again["ratio"] < got["ratio"] else got
    assert got["ratio"] <= hot_path.LIMIT * figure["ratio"], (
        f"the sidecar's parse + update of the anchor costs {got['sidecar_ms']:.2f} ms, "
        f"{got['ratio'] / figure['ratio']:.2f}x the committed ratio to prometheus_client "
        f"({figure['ratio']:.5f} at {figure['commit']}, {figure['date']}; now {got['ratio']:.5f}, the client "
        f"{got['prometheus_client_ms']:.0f} ms): find what made every scrape read or do more (`python -m bench "
        f"--only parse`), or, for a change that must cost this, record the new figure with `python -m bench.hot_path "
        f"--write` and say why in the commit")


def test_the_committed_figure_names_its_commit_date_and_exposition():
    figure = hot_path.committed()
    assert figure["ratio"] > 0 and figure["commit"] and not figure["commit"].endswith("-dirty")
    assert figure["date"] and "x 32 DP ranks" in figure["exposition"]
