"""`slo-monitor analyze` through the real CLI: clear errors, and a report written from a recording."""

from __future__ import annotations

from monitor.cli import main
from tests.analyze.conftest import EPOCH, T1, T2
from tests.conftest import free_port


def test_unreachable_prometheus_is_one_clear_error(capsys, tmp_path):
    port = free_port()  # nothing listens there
    rc = main(["analyze", "-d", "llama", "--from=-1h", "--to", "now", "--prometheus", f"http://127.0.0.1:{port}",
               "-o", str(tmp_path / "r"), "--timeout", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and f"cannot reach Prometheus at http://127.0.0.1:{port}" in err
    assert "Traceback" not in err


def test_bad_times_and_missing_recording_are_clear(capsys, tmp_path):
    assert main(["analyze", "-d", "x", "--from", "soon", "--to", "now", "--recording", str(tmp_path / "r.db")]) == 2
    assert "not a time: 'soon'" in capsys.readouterr().err
    assert main(["analyze", "-d", "x", "--from=-1h", "--to", "now", "--recording", str(tmp_path / "r.db")]) == 2
    assert "no recording here" in capsys.readouterr().err


def test_cli_writes_the_reports_and_shows_progress(overheat_run, capsys, tmp_path):
    out = tmp_path / "report"
    rc = main(["analyze", "-d", "llama", "--from", str(EPOCH + T1), "--to", str(EPOCH + T2), "--window", "1m",
               "--recording", str(overheat_run.recording), "-o", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "analyze: reading" in cap.err
    assert cap.out.startswith("Accelerator overheating (") and "accelerator temperature (hottest chip) rose" in cap.out
    assert {p.name for p in out.iterdir()} == {"report.md", "report.html", "report.json", "plots"}
    assert (out / "plots" / "tpot-movers.png").stat().st_size > 10_000


def test_the_window_defaults_to_a_fifth_of_the_range_from_one_to_five_minutes():
    from monitor.commands.analyze import auto_window

    assert [auto_window(s) for s in (120, 600, 660, 1500, 3600, 86400)] == [60, 120, 120, 300, 300, 300]


def test_without_window_the_report_says_which_window_it_chose(overheat_run, capsys, tmp_path):
    import json

    out = tmp_path / "report"
    rc = main(["analyze", "-d", "llama", "--from", str(EPOCH + T1), "--to", str(EPOCH + T2),
               "--recording", str(overheat_run.recording), "-o", str(out)])
    assert rc == 0, capsys.readouterr().err
    rep = json.loads((out / "report.json").read_text())
    assert rep["window_seconds"] == 120  # a 660 s range: 5m would eat the baseline as warm-up
    assert any("SLI window 120 s, chosen from the 660 s range" in n for n in rep["notes"]), rep["notes"]


def test_a_second_report_in_the_same_directory_says_it_replaces_the_first_and_leaves_none_of_its_plots(
        overheat_run, capsys, tmp_path):
    out = tmp_path / "report"
    (out / "plots").mkdir(parents=True)
    (out / "plots" / "e2e-movers.png").write_bytes(b"a plot of another deployment's report")
    args = ["analyze", "-d", "llama", "--from", str(EPOCH + T1), "--to", str(EPOCH + T2), "--window", "1m",
            "--recording", str(overheat_run.recording), "-o", str(out)]
    assert main(args) == 0
    assert "replaced" not in capsys.readouterr().err  # no report.json there yet: nothing replaced
    plots = {p.name for p in (out / "plots").iterdir()}
    assert "e2e-movers.png" not in plots and "tpot-movers.png" in plots
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"{out}: replaced the report of llama " in err


def test_the_range_a_paged_user_types_reads_from_the_recordings_first_scrape_and_names_the_same_mechanism(
        overheat_run, capsys, tmp_path):
    """#32 item 6: `--from now-1h --to now` with no other flag, `--now` standing for the clock at the page. The
    recording is 16 minutes old: the range read starts at its first scrape (said in the notes), the window is a
    fifth of that, and the overheating is named as over the explicit range."""
    import json

    out = tmp_path / "report"
    rc = main(["analyze", "-d", "llama", "--from", "now-1h", "--to", "now", "--now", str(EPOCH + T2),
               "--recording", str(overheat_run.recording), "-o", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert cap.out.startswith("Accelerator overheating ("), cap.out
    rep = json.loads((out / "report.json").read_text())
    assert any("the range read starts there, not at --from" in n for n in rep["notes"]), rep["notes"]
    assert rep["window_seconds"] == 180, rep["notes"]  # a fifth of the ~950 s read, in whole minutes


def test_now_is_checked_like_any_other_time(capsys, tmp_path):
    assert main(["analyze", "-d", "x", "--from", "now-1h", "--to", "now", "--now", "at the page",
                 "--recording", str(tmp_path / "r.db")]) == 2
    assert "not a time: 'at the page'" in capsys.readouterr().err
