"""The diagnosis grid (tools/incident_lab/grid.py): a slice of it through the same code path as
`make confusion-grid` (two seeds, one per half; a healthy control, one incident and one pair, at the light rate),
and the committed section of docs/analysis.md, parsed. The full grid is never run here (half an hour)."""

from __future__ import annotations

import random
import re

import pytest

from monitor.analyze import diagnose as m
from tools.incident_lab import grid
from tools.incident_lab.confusion import DOC

SLICE = ("healthy", "tpot-regression", "surge+decode-slowdown")


def test_the_seed_halves_are_disjoint_and_every_seed_has_one():
    tuned, held = set(grid.TUNED_SEEDS), set(grid.HELD_OUT_SEEDS)
    assert not tuned & held
    assert tuned | held == set(range(len(tuned) + len(held)))
    assert {grid.split_of(s) for s in range(10)} == set(grid.SPLITS)
    with pytest.raises(ValueError):
        grid.split_of(10_000)


def test_every_kind_has_three_magnitudes_and_the_rates_go_from_light_to_busy():
    singles = [c for c in grid.CELLS if c.magnitude in grid.MAGNITUDES]
    steps = {c.scenario for c in singles if not any(i.ramp for i in c.injects)}
    assert len(steps) == 11  # every injectable kind of the confusion table, PD prefill-only included
    for k in steps:
        assert [c.magnitude for c in singles if c.scenario == k] == list(grid.MAGNITUDES)
    # A slowdown and a surge ramped in over RAMP seconds too, at medium and strong.
    ramps = [c for c in singles if c.scenario not in steps]
    assert {c.scenario for c in ramps} == {"tpot-regression-ramp", "queue-buildup-ramp"}
    assert all(c.magnitude != "weak" and c.injects[0].ramp == grid.RAMP for c in ramps)
    assert all(c.injects[0].spec("d").endswith(f"~{grid.RAMP:g}") for c in ramps)
    pairs = [c for c in grid.CELLS if c.pair]
    assert len(pairs) == 5 and all(len(c.injects) == 2 and c.injects[0].start < c.injects[1].start for c in pairs)
    assert [c.scenario for c in grid.CELLS if c.magnitude == grid.NONE] == ["healthy"]
    for template, rates in grid.RATES.items():
        assert [rates[x] for x in grid.LOADS] == sorted(rates.values())
        for load, rate in rates.items():  # ~30 / 60 / 90 % of the measured capacity
            assert rate == pytest.approx(grid.LOAD_SHARE[load] * grid.CAPACITY[template], abs=0.1)
    names = [c.name(load) for c in grid.CELLS for load in grid.LOADS]
    assert len(set(names)) == len(names) and all(re.fullmatch(r"[a-z0-9][a-z0-9._-]*", n) for n in names)


# A fixed random sample of the grid's other cells (#32 item 7), rerun beside SLICE at one rate; the seed is fixed so
# that the sample is the same on every run, and unrelated to the lab's own seeds.
SAMPLE_RATE = random.Random(3207).choice(grid.LOADS)
SAMPLE = tuple(c.scenario for c in random.Random(3207).sample(
    [c for c in grid.CELLS if c.magnitude == "medium" and c.scenario not in SLICE], 3))


@pytest.fixture(scope="module")
def slice_():
    cells = grid.select(SLICE, ["medium"])
    return cells, grid.run_grid((0, 1), jobs=2, loads=("light",), cells=cells)


@pytest.fixture(scope="module")
def sample():
    return grid.run_grid((0, 1), jobs=2, loads=(SAMPLE_RATE,), cells=grid.select(SAMPLE, ["medium"]))


def _verdict(r: grid.Result) -> tuple:
    return r.mechanism, tuple(r.named), r.confidence, r.right


def test_rerun_runs_give_the_committed_verdicts(slice_, sample):
    """The committed results are the current analyzer's: the slice and the fixed sample, rerun, give each run's
    verdict (mechanism, every mechanism named, confidence) exactly as committed (the lab is deterministic per
    seed). An analyzer change that moves a verdict fails here until `make confusion-grid` is run again."""
    committed_by = {(r.scenario, r.magnitude, r.load, r.seed): r for r in grid.load(grid.RESULTS).results}
    rerun = [*slice_[1].results, *sample.results]
    assert len(rerun) == 2 * (len(SLICE) + len(SAMPLE))
    differ = [(key, _verdict(r), _verdict(committed_by[key])) for r in rerun
              for key in [(r.scenario, r.magnitude, r.load, r.seed)] if _verdict(r) != _verdict(committed_by[key])]
    assert not differ, differ


def test_the_doc_section_is_rendered_from_the_committed_results():
    """Every figure of the section, goal lines included, is recomputed from the saved results, not read from the
    doc: a doc edited by hand, or results saved without the doc, fail here."""
    assert grid.section(grid.load(grid.RESULTS)) == committed()


def test_a_slice_runs_every_cell_at_every_seed_and_keeps_the_halves_apart(slice_):
    cells, g = slice_
    assert [c.scenario for c in cells] == list(SLICE)
    assert len(g.results) == len(cells) * 2
    for r in g.results:
        assert r.split == grid.split_of(r.seed) and r.load == "light"
        assert r.named[0] == r.mechanism and r.confidence in ("high", "medium", "low")
        assert r.headline.startswith(m.TITLES[r.mechanism][:1].upper() + m.TITLES[r.mechanism][1:])
    assert {(r.split, r.seed) for r in g.results} == {(grid.TUNED, 0), (grid.HELD_OUT, 1)}
    pair = [r for r in g.results if r.scenario == "surge+decode-slowdown"]
    assert all(r.expect == (m.OVERLOAD, m.DECODE_SLOWDOWN) for r in pair)
    assert all(r.right == (r.named[0] == m.OVERLOAD and m.DECODE_SLOWDOWN in r.named[1:]) for r in pair)
    healthy = [r for r in g.results if r.scenario == "healthy"]
    assert all(r.right == (r.mechanism in grid.NO_INCIDENT) for r in healthy)


def test_the_slice_renders_the_sections_tables(slice_, tmp_path):
    cells, g = slice_
    text = grid.section(g)
    rows = grid.parse_table(text, grid.TABLE_HEADER)
    assert len(rows) == len(cells) * 2 and {r["split"] for r in rows} == set(grid.SPLITS)
    assert all(r["runs"] == "1" and r["rate"] == "light 1.0/s" for r in rows)
    assert {r["scenario"] for r in rows} == set(SLICE)
    wrong = grid.parse_table(text, grid.WRONG_HEADER)
    assert len(wrong) == sum(int(r["runs"]) - int(r["right"]) for r in rows)
    calib = grid.parse_table(text, grid.CALIBRATION_HEADER)
    assert sum(int(r["runs"]) for r in calib) == len(g.results)
    goals = [line for line in text.splitlines() if line.startswith(("- tuned: ", "- held-out: "))]
    assert len(goals) == 10 and all(line.endswith(("— met", "— **missed**")) for line in goals)
    # Saved and loaded, the same section; written into a doc under its title, then replaced in place.
    grid.save(g, tmp_path / "g.json")
    assert grid.section(grid.load(tmp_path / "g.json")) == text
    doc = tmp_path / "analysis.md"
    doc.write_text("# Title\n\n```\nusage\n```\n")
    assert grid.write_doc(text, doc) and grid.doc_section(doc) == text
    assert doc.read_text().startswith(f"# Title\n\n{grid.GRID_HEADING}\n\n{grid.GRID_BEGIN}\n")
    assert not grid.write_doc(text, doc)


def committed() -> str:
    text = grid.doc_section(DOC)
    assert text is not None, "docs/analysis.md has no grid section: run `make confusion-grid`"
    return text


def test_the_doc_opens_with_the_committed_grid():
    doc = DOC.read_text(encoding="utf-8")
    title, rest = doc.split("\n", 1)
    assert title.startswith("# ") and rest.lstrip().startswith(grid.GRID_HEADING)
    assert doc.index(grid.GRID_END) < doc.index("## Confusion table")
    text = committed()
    first = [line for line in text.splitlines() if line][:11]
    assert first[0].startswith("**Goals") and all(x.startswith(("- tuned: ", "- held-out: ")) for x in first[1:])
    assert re.search(r"The grid took \*\*\d+\.\d min\*\*", text)


def test_the_committed_grid_has_every_row_for_both_halves():
    text = committed()
    assert grid.TABLE_HEADER in text.splitlines()
    rows = grid.parse_table(text, grid.TABLE_HEADER)
    for split in grid.SPLITS:
        mine = [r for r in rows if r["split"] == split]
        assert len(mine) == len(grid.CELLS) * len(grid.LOADS)
        assert {(r["scenario"], r["rate"].split()[0]) for r in mine} == {
            (c.scenario, load) for c in grid.CELLS for load in grid.LOADS}
        runs = {int(r["runs"]) for r in mine}
        assert len(runs) == 1 and runs.pop() >= 5  # >= 10 seeds: >= 5 a half
        for r in mine:
            assert 0 <= int(r["high-confidence wrong"]) <= int(r["runs"]) - int(r["right"])
        calib = [r for r in grid.parse_table(text, grid.CALIBRATION_HEADER) if r["split"] == split]
        assert sum(int(r["runs"]) for r in calib) == sum(int(r["runs"]) for r in mine)
        assert sum(int(r["right"]) for r in calib) == sum(int(r["right"]) for r in mine)
        wrong = [r for r in grid.parse_table(text, grid.WRONG_HEADER) if r["split"] == split]
        assert len(wrong) == sum(int(r["runs"]) - int(r["right"]) for r in mine)
        parity = 0 if split == grid.TUNED else 1
        assert all(int(r["seed"]) % 2 == parity for r in wrong)


def test_the_committed_grid_meets_every_goal_on_the_held_out_half():
    goals = [line for line in committed().splitlines() if line.startswith("- held-out: ")]
    assert goals and all(line.endswith("— met") for line in goals), "\n".join(goals)
