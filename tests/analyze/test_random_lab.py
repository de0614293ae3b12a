"""The randomized incident lab (tools/incident_lab/randomized.py): its draws (deterministic per seed, every workload,
band and both orders of pairs over ten seeds, the shape rules), the judging of a pair, the section (the held-out
half never listed run by run; rendered the same from saved results) and one tiny lockstep task. The lab itself is
never run here (`make confusion-random`)."""

from __future__ import annotations

import gzip
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from monitor.analyze import diagnose as m
from monitor.emulate.incidents import parse_spec
from tools.incident_lab import grid
from tools.incident_lab import randomized as R

SEEDS = tuple(range(10))


@pytest.fixture(scope="module")
def draws() -> list[R.Draw]:
    return [d for s in SEEDS for d in R.draw_seed(s, R.RUNS_PER_SEED)]


def test_the_draws_are_deterministic_per_seed_and_differ_between_seeds():
    a = R.draw_seed(3, 24)
    random.seed(12345)  # the global stream plays no part
    random.random()
    assert R.draw_seed(3, 24) == a
    assert R.draw_seed(3, 10) == a[:10]  # more runs a seed only adds runs
    assert R.draw_seed(4, 24) != a
    assert len({(d.workload, d.share, d.incidents, d.t1, d.t2) for s in SEEDS for d in R.draw_seed(s, 5)}) == 50


def test_over_ten_seeds_every_workload_kind_band_and_both_orders_occur(draws):
    assert {d.workload for d in draws} == set(R.WORKLOADS)
    assert {i.key for d in draws for i in d.incidents} == set(R.KINDS)
    assert {i.band for d in draws for i in d.incidents} == set(R.BANDS)
    assert {i.band for d in draws if len(d.incidents) == 1 for i in d.incidents} == set(R.BANDS)
    n = Counter(len(d.incidents) for d in draws)
    assert 0.08 < n[0] / len(draws) < 0.25 and 0.4 < n[1] / len(draws) < 0.6 and 0.25 < n[2] / len(draws) < 0.45
    pairs = [d.kinds for d in draws if len(d.kinds) == 2]
    forward = sum(k == tuple(sorted(k)) for k in pairs)
    assert 0.35 < forward / len(pairs) < 0.65
    assert any(tuple(reversed(k)) in pairs for k in pairs)  # one pair drawn in both orders
    assert any(d.gap is not None and d.gap >= R.ORDER_GAP for d in draws)
    assert any(d.gap is not None and d.gap < R.ORDER_GAP for d in draws)
    assert any(i.ramp for d in draws for i in d.incidents) and any(
        not i.ramp and R.KINDS[i.key].ramps for d in draws for i in d.incidents)
    shares = [d.share for d in draws]
    assert R.LOAD_SHARES[0] <= min(shares) and max(shares) <= R.LOAD_SHARES[1]


def test_every_draw_keeps_the_shape_rules(draws):
    names = [d.name for d in draws]
    assert len(set(names)) == len(names) and all(re.fullmatch(r"[a-z0-9][a-z0-9._-]*", x) for x in names)
    for d in draws:
        wl = R.WORKLOADS[d.workload]
        assert set(d.kinds) <= set(wl.kinds)
        onsets = [i.start for i in d.incidents]
        assert onsets == sorted(onsets)
        if d.incidents:
            first, last = d.incidents[0], d.incidents[-1]
            assert R.ONSET[0] <= first.start <= R.ONSET[1]
            assert d.t1 >= R.MIN_DATA and R.LEAD[0] <= first.start - d.t1 <= R.LEAD[1]
            assert d.t2 >= last.start + R.MIN_AFTER_ONSET - 0.5
        assert d.t1 < d.t2
        for inc in d.incidents:
            k = R.KINDS[inc.key]
            assert R.band_of(inc.key, inc.magnitude, d.workload) == inc.band
            assert 0 <= inc.ramp <= inc.duration and (k.ramps or not inc.ramp)
            if k.kind == "restart":
                assert 0 <= inc.magnitude <= R.RESTART_DOWN and inc.duration == inc.magnitude
                assert inc.expected() == ((m.RESTART, m.SERVER_DOWN) if inc.magnitude else (m.RESTART,))
            elif k.kind == "client_timeout":
                share = (inc.magnitude + R.ABORT_AFTER) / R.nominal_e2e(d.workload)
                lo, hi = sorted((R._abort_share(k.weak, "llama"), R._abort_share(k.strong, "llama")))
                assert lo - 0.01 <= share <= hi + 0.01
            else:
                lo, hi = sorted((k.weak, k.strong))
                assert lo * 0.99 <= inc.magnitude <= hi * 1.01
                if k.kind == "down":
                    assert inc.duration == inc.magnitude
                else:
                    assert R.DURATION[0] <= inc.duration
            # What is injected is what was drawn: the emulator's parse of the spec.
            spec = parse_spec(inc.inject.spec(d.name))
            assert (spec.deployment, spec.kind, spec.start, spec.ramp) == (d.name, k.kind, inc.start, inc.ramp)
            assert spec.role == (k.role or None)
            if k.kind not in ("down", "restart"):
                assert spec.factor == inc.magnitude and spec.duration == inc.duration
        if len(d.incidents) == 2:
            a, b = d.incidents
            assert a.key != b.key and frozenset(d.kinds) not in R.EXCLUDED_PAIRS
            assert d.gap is not None and R.GAP[0] <= d.gap <= R.GAP[1]
            if R.KINDS[a.key].kind not in ("down", "restart"):
                assert a.end >= b.start + R.OVERLAP  # they happen together
            for down, other in ((a, b), (b, a)):
                if R.KINDS[down.key].kind == "down":  # the other is never hidden behind the outage
                    outside = max(0.0, min(other.end, down.start) - other.start) + max(0.0, other.end - down.end)
                    assert outside >= R.DOWN_VISIBLE - 0.5


def test_pairs_exclude_what_no_signal_could_tell_apart():
    for w in R.WORKLOADS:
        ps = R.pairs(w)
        assert ps and len(set(ps)) == len(ps) and all(a < b for a, b in ps)
        assert ("npu_overheat", "tpot_regression") not in ps and ("down", "restart") not in ps
    assert ("kv_transfer_failure", "ttft_spike/prefill") in R.pairs("pd")
    assert not any("spec_accept_drop" in p for p in R.pairs("llama"))


def test_bands_are_thirds_of_the_log_range_between_the_grids_weak_and_strong():
    k = R.KINDS["tpot_regression"]
    assert (k.weak, k.strong, k.mechanism) == (1.3, 4.0, m.DECODE_SLOWDOWN)
    assert [R.band_of("tpot_regression", x, "llama") for x in (1.3, 1.8, 2.0, 2.7, 4.0)] == [
        "weak", "weak", "medium", "medium", "strong"]
    # A decreasing scale: the share of KV left (the grid's weak 90 %, strong 30 %).
    assert [R.band_of("hbm_full", x, "llama") for x in (0.9, 0.6, 0.3)] == ["weak", "medium", "strong"]
    assert [R.band_of("restart", x, "llama") for x in (0, 9, 15, 30)] == ["weak", "weak", "medium", "strong"]
    # Client timeouts: between the grid's 2.5 and 1 s on the lab's Llama (aborted 2 s later: thirds of 4.5 .. 3 s, so
    # the grid's medium 2 s is weak here), the same shares of a slower workload's answers.
    assert [R.band_of("client_timeout", x, "llama") for x in (2.5, 2.0, 1.6, 1.0)] == [
        "weak", "weak", "medium", "strong"]
    slow = R.nominal_e2e("long-answer") / R.nominal_e2e("llama")
    assert R.band_of("client_timeout", (1.0 + R.ABORT_AFTER) * slow - R.ABORT_AFTER, "long-answer") == "strong"


# --- judging ----------------------------------------------------------------------------------------------------

SURGE, SLOW = (m.OVERLOAD,), (m.DECODE_SLOWDOWN,)


@pytest.mark.parametrize(("named", "gap", "blamed", "want"), [
    ((m.OVERLOAD, m.DECODE_SLOWDOWN), 90.0, None, (True, True, True)),
    ((m.DECODE_SLOWDOWN, m.OVERLOAD), 90.0, None, (False, True, False)),  # both named, out of order
    ((m.DECODE_SLOWDOWN, m.OVERLOAD), 59.0, None, (True, True, None)),  # < 1 min apart: the order is not judged
    ((m.DECODE_SLOWDOWN, m.OVERLOAD), 60.0, None, (False, True, False)),  # exactly 1 min: judged
    ((m.OVERLOAD,), 90.0, None, (False, False, True)),  # the second not named
    ((m.OVERLOAD, m.KV_CAPACITY), 30.0, None, (False, False, None)),
    ((m.OVERLOAD, m.DECODE_SLOWDOWN), 90.0, "queue", (False, True, True)),  # a consequence called the cause
])
def test_a_pair_is_judged_both_named_and_leading_first(named, gap, blamed, want):
    assert R.judge_pair((SURGE, SLOW), gap, named, blamed) == want


def test_a_pairs_alternative_names_count_and_make_result_records_them():
    restart = R.Drawn("restart", 12.0, "medium", 200.0, 12.0)
    surge = R.Drawn("queue_buildup", 2.0, "medium", 290.0, 150.0)
    d = R.Draw(0, 7, "llama", 0.5, (restart, surge), 150.0, 500.0)
    assert d.expected == ((m.RESTART, m.SERVER_DOWN), SURGE) and d.gap == 90.0
    r = R.make_result(d, 1.6, m.SERVER_DOWN, (m.SERVER_DOWN, m.OVERLOAD), (m.SERVER_DOWN, m.OVERLOAD), "high",
                      "Server down ...", None)
    assert (r.right, r.both_named, r.lead_first, r.split, r.order) == (True, True, True, grid.TUNED,
                                                                     "restart → queue_buildup")
    r = R.make_result(d, 1.6, m.OVERLOAD, (m.OVERLOAD, m.RESTART), (), "medium", "Overload ...", None)
    assert (r.right, r.both_named, r.lead_first) == (False, True, False)
    single = R.Draw(1, 0, "llama", 0.5, (surge,), 150.0, 500.0)
    r = R.make_result(single, 1.6, m.OVERLOAD, (m.OVERLOAD,), (), "high", "Overload ...", None, right=True)
    assert (r.right, r.both_named, r.lead_first, r.split) == (True, None, None, grid.HELD_OUT)


# --- the section ------------------------------------------------------------------------------------------------

TUNED_MARK = "Tuned-wrong-marker verdict"
HELD_MARK = "Held-out-wrong-marker verdict"


def _fake_lab(seeds: tuple[int, ...] = (0, 1, 2, 3), runs: int = 24) -> R.RandomLab:
    """Every draw of `seeds` with a made-up verdict: right, save one wrong run planted in each half."""
    results = []
    planted = {grid.TUNED: False, grid.HELD_OUT: False}
    for d in (d for s in seeds for d in R.draw_seed(s, runs)):
        split = grid.split_of(d.seed)
        exp = [e[0] for e in d.expected] or [m.HEALTHY]
        conf = ("high", "medium", "low")[d.index % 3]
        weak_single = len(d.incidents) == 1 and d.incidents[0].band == "weak"  # its goal line counts mechanisms
        if not planted[split] and not weak_single:  # the half's first such run named a fault nobody injected
            planted[split] = True
            mark = TUNED_MARK if split == grid.TUNED else HELD_MARK
            mech = m.ACCELERATOR_UNHEALTHY if split == grid.TUNED else m.KV_TRANSFER_SLOWDOWN
            results.append(R.make_result(d, 1.0, mech, (mech,), (mech,), "medium", f"{mark}: nothing", None,
                                         right=False))
            continue
        results.append(R.make_result(d, round(d.share * 3, 3), exp[0], tuple(exp), tuple(exp), conf,
                                     f"{m.TITLES[exp[0]]} ({conf} confidence)", None,
                                     right=None if len(d.incidents) == 2 else True))
    assert all(planted.values())
    cap = {w: 1.0 + i for i, w in enumerate(R.WORKLOADS)}
    return R.RandomLab(results, seeds, runs, 2, 61.0, [30.0, 31.0], 0.4, cap, 3600.0 * 2)


def test_the_held_out_half_is_reported_as_totals_only():
    lab = _fake_lab()
    text = R.section(lab)
    assert HELD_MARK not in text and m.KV_TRANSFER_SLOWDOWN not in text  # not its first line, not its verdict
    assert TUNED_MARK in text and m.ACCELERATOR_UNHEALTHY in text  # the tuned half's wrong run is listed
    wrong = grid.parse_table(text, R.WRONG_HEADER)
    assert len(wrong) == 1 and all(int(r["seed"]) % 2 == 0 for r in wrong)
    common = next(line for line in text.splitlines() if line.startswith("Most common wrong verdicts"))
    assert "→ accelerator_unhealthy (1)" in common and "kv_transfer_slowdown" not in common
    # Its totals are there: the held-out half has one run fewer right than it has runs.
    held = [r for r in lab.results if r.split == grid.HELD_OUT]
    assert sum(not r.right for r in held) == 1
    rows = grid.parse_table(text, R.WORKLOAD_HEADER)
    right = [r["held-out right"].split("/") for r in rows if r["held-out right"] != "—"]
    assert sum(int(n) - int(k) for k, n in right) == 1


def test_the_section_renders_from_saved_results(tmp_path: Path):
    lab = _fake_lab()
    text = R.section(lab)
    path = tmp_path / "random.json.gz"
    R.save(lab, path)
    raw = path.read_bytes()
    assert raw[4:8] == b"\0\0\0\0"  # gzip mtime 0: the same results, the same bytes
    R.save(R.load(path), path)
    assert path.read_bytes() == raw
    back = R.load(path)
    assert back == lab and R.section(back) == text
    assert gzip.decompress(raw).startswith(b'{"results":[')
    # The tables add up.
    kinds = grid.parse_table(text, R.KIND_HEADER)
    singles = sum(1 for r in lab.results if len(r.kinds) < 2)
    assert sum(int(r["tuned runs"]) + int(r["held-out runs"]) for r in kinds) == singles
    for header in (R.PAIR_HEADER, R.ORDERED_HEADER):
        rows = grid.parse_table(text, header)
        assert sum(int(r["tuned runs"]) + int(r["held-out runs"]) for r in rows) == sum(r.pair for r in lab.results)
    assert len(grid.parse_table(text, R.ORDERED_HEADER)) >= len(grid.parse_table(text, R.PAIR_HEADER))
    work = grid.parse_table(text, R.WORKLOAD_HEADER)
    assert [r["workload"] for r in work] == list(R.WORKLOADS)
    assert sum(int(r["runs"]) for r in work) == len(lab.results)
    calib = grid.parse_table(text, grid.CALIBRATION_HEADER)
    assert sum(int(r["runs"]) for r in calib) == len(lab.results)
    goals = [line for line in text.splitlines() if line.startswith(("- tuned: ", "- held-out: "))]
    assert len(goals) == 18 and all(line.endswith(("— met", "— **missed**")) for line in goals)


def test_the_users_path_goal_counts_the_same_mechanism_and_no_mechanism_named_by_either_alike():
    """Item 6's lines: the CLI over each range a paged user types against the explicit range's verdict. A steady
    breach against an unexplained one is the same finding (neither names a cause); another mechanism is not."""
    d = R.draw_seed(0, 1)[0]
    pairs = [(m.OVERLOAD, (m.OVERLOAD, m.OVERLOAD)), (m.STEADY_BREACH, (m.UNEXPLAINED, m.HEALTHY)),
             (m.OVERLOAD, (m.DECODE_SLOWDOWN, m.OVERLOAD)), (m.HEALTHY, ())]
    rs = [R.make_result(d, 1.0, mech, (mech,), (), "medium", "…", None, right=True, user=user) for mech, user in pairs]
    lines = [g for g in R.goals(rs, grid.TUNED) if g.startswith("(item 6)")]
    assert len(lines) == len(R.USER_RANGES) == 2
    assert "now-1h" in lines[0] and "2/3" in lines[0] and lines[0].endswith("**missed**"), lines  # () not read
    assert "now-30m" in lines[1] and "3/3" in lines[1] and lines[1].endswith("— met"), lines
    assert R.same_finding(m.HEALTHY, m.UNEXPLAINED) and not R.same_finding(m.HEALTHY, m.OVERLOAD)


def test_the_section_goes_after_the_grids_and_is_replaced_in_place(tmp_path: Path):
    text = R.section(_fake_lab((0, 1), 6))
    doc = tmp_path / "analysis.md"
    doc.write_text(f"# Title\n\n{grid.GRID_HEADING}\n\n{grid.GRID_BEGIN}\ngrid\n{grid.GRID_END}\n\n## Usage\n")
    assert R.write_doc(text, doc) and R.doc_section(doc) == text
    body = doc.read_text()
    assert body.index(grid.GRID_END) < body.index(R.RANDOM_HEADING) < body.index(R.RANDOM_BEGIN) < body.index(
        "## Usage")
    assert not R.write_doc(text, doc)
    other = R.section(_fake_lab((0, 1), 5))
    assert R.write_doc(other, doc) and R.doc_section(doc) == other and doc.read_text().count(R.RANDOM_HEADING) == 1


# --- one tiny task through the lab's own code path --------------------------------------------------------------

def test_a_tiny_task_runs_and_judges_its_draws(tmp_path: Path):
    """The two shortest runs of seed 0 in one emulator (a few seconds): analysed over their own ranges, judged."""
    short = sorted(R.draw_seed(0, R.RUNS_PER_SEED), key=lambda d: d.t2)[:2]
    tr = R.run_task(0, [R.Deploy(d, round(d.share * 2.0, 3)) for d in short], str(tmp_path))
    assert [r.index for r in tr.results] == [d.index for d in short] and tr.emulated == max(d.t2 for d in short)
    for d, r in zip(short, tr.results):
        assert (r.seed, r.split, r.workload, r.kinds, r.t1, r.t2) == (0, grid.TUNED, d.workload, d.kinds, d.t1, d.t2)
        assert r.named[0] == r.mechanism and r.confidence in ("high", "medium", "low") and r.headline
        assert len(r.user) == len(R.USER_RANGES) and all(u in m.TITLES for u in r.user), r.user  # the CLI's reading
        if len(d.incidents) == 2:
            assert r.right == R.judge_pair(d.expected, d.gap or 0.0, r.named, r.consequence_as_cause)[0]
        else:
            ok = r.mechanism in (d.expected[0] if d.incidents else grid.NO_INCIDENT)
            assert r.right == (ok and r.consequence_as_cause is None)



def test_kept_recordings_reanalyse_to_the_same_verdicts(tmp_path: Path):
    """`--keep` keeps each task's recording and `--reanalyse` analyses it again without the emulator: the same
    draws, the same verdicts (what makes an analyzer change quick to measure on the whole lab)."""
    short = sorted(R.draw_seed(0, R.RUNS_PER_SEED), key=lambda d: d.t2)[:2]
    keep = tmp_path / "keep"
    tr = R.run_task(0, [R.Deploy(d, round(d.share * 2.0, 3)) for d in short], str(tmp_path), str(keep))
    again = R.reanalyse(keep, jobs=1)
    assert [(r.index, r.mechanism, r.named, r.confidence, r.right, r.headline, r.user) for r in again.results] == \
        [(r.index, r.mechanism, r.named, r.confidence, r.right, r.headline, r.user)
         for r in sorted(tr.results, key=lambda r: r.index)]


# --- the committed results (docs/analysis-random.json.gz) and the doc's section ----------------------------------

def test_the_doc_section_is_rendered_from_the_committed_results():
    """Every figure of the section (goals recomputed, tables, calibration) comes from the committed results."""
    lab = R.load(R.RESULTS)
    assert R.doc_section() == R.section(lab)
    assert len(lab.results) == len(lab.seeds) * lab.runs_per_seed
    assert {r.split for r in lab.results} == {grid.TUNED, grid.HELD_OUT}



@pytest.mark.parametrize("seed", [0, 1])
def test_rerun_committed_runs_give_the_committed_verdicts(seed, tmp_path: Path):
    """A fixed random sample of one seed of each half (among its shorter runs, to keep it quick) is rerun through
    the lab's own path and must give the committed verdict: mechanism, everything named, confidence, right."""
    lab = R.load(R.RESULTS)
    committed = {r.index: r for r in lab.results if r.seed == seed}
    draws = sorted(R.draw_seed(seed, lab.runs_per_seed), key=lambda d: (d.t2, d.index))[: lab.runs_per_seed // 2]
    sample = sorted(random.Random(3208 + seed).sample(draws, 3), key=lambda d: d.index)
    tr = R.run_task(seed, [R.Deploy(d, committed[d.index].rate) for d in sample], str(tmp_path))
    for r in tr.results:
        c = committed[r.index]
        assert (r.mechanism, r.named, r.confidence, r.right, r.user) == \
            (c.mechanism, c.named, c.confidence, c.right, c.user), (r.index, r.headline, c.headline)
