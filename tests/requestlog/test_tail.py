from __future__ import annotations

import os
from pathlib import Path

from monitor.requestlog.tail import LogTailer
from tests.requestlog.conftest import append, hour_start, line, name_for, rec


def texts(ev) -> list[str]:
    return [ln.text for ln in ev.lines]


def test_partial_last_line_waits_for_its_newline(log_dir: Path):
    f = log_dir / name_for("20250102_03")
    full = line(rec("a", 1.0))
    append(f, line(rec("z", 0.5)) + full[:20])
    t = LogTailer(log_dir)
    assert [ln.number for ln in t.poll().lines] == [1]
    assert t.poll().lines == []  # still no newline
    append(f, full[20:])
    ev = t.poll()
    assert texts(ev) == [full.strip()] and ev.lines[0].number == 2


def test_hour_rollover_while_old_file_gets_last_lines(log_dir: Path):
    old, new = log_dir / name_for("20250102_03"), log_dir / name_for("20250102_04")
    append(old, line(rec("1", 1.0)))
    t = LogTailer(log_dir)
    seen = texts(t.poll())
    append(new, line(rec("3", 3.0)))
    append(old, line(rec("2", 2.0)))  # a late write to the old hour after the new file appeared
    seen += texts(t.poll())
    append(old, line(rec("2b", 2.5)))
    append(new, line(rec("4", 4.0)))
    seen += texts(t.poll())
    seen += texts(t.poll())
    ids = sorted(__import__("json").loads(s)["id"] for s in seen)
    assert ids == ["1", "2", "2b", "3", "4"]


def test_truncated_file_is_read_again_from_start(log_dir: Path):
    f = log_dir / name_for("20250102_03")
    append(f, line(rec("1", 1.0)) + line(rec("2", 2.0)))
    t = LogTailer(log_dir)
    assert len(t.poll().lines) == 2
    with open(f, "w", encoding="utf-8") as fh:  # logrotate copytruncate
        fh.write(line(rec("3", 3.0)))
    ev = t.poll()
    assert ev.truncated == [f.name] and [ln.number for ln in ev.lines] == [1]


def test_deleted_and_recreated_files(log_dir: Path):
    f = log_dir / name_for("20250102_03")
    append(f, line(rec("1", 1.0)))
    t = LogTailer(log_dir)
    t.poll()
    f.unlink()
    assert t.poll().deleted == [f.name]
    append(f, line(rec("2", 2.0)))
    ev = t.poll()
    assert len(ev.lines) == 1 and f.name in t.files


def test_replaced_file_under_same_name(log_dir: Path):
    f = log_dir / name_for("20250102_03")
    append(f, line(rec("1", 1.0)) + line(rec("2", 2.0)) + line(rec("3", 3.0)))
    t = LogTailer(log_dir)
    t.poll()
    tmp = log_dir / "other"
    append(tmp, line(rec("4", 4.0)))
    os.replace(tmp, f)  # new inode, smaller
    ev = t.poll()
    assert ev.replaced == [f.name] and len(ev.lines) == 1


def test_restart_replays_counted_lines_then_continues(log_dir: Path):
    f = log_dir / name_for("20250102_03")
    append(f, line(rec("1", 1.0)) + line(rec("2", 2.0)))
    t = LogTailer(log_dir)
    t.poll()
    saved = t.snapshot()
    append(f, line(rec("3", 3.0)))
    t2 = LogTailer(log_dir, saved)
    ev = t2.poll()
    assert [(ln.number, ln.replayed) for ln in ev.lines] == [(1, True), (2, True), (3, False)]
    assert t2.poll().lines == []


def test_files_older_than_horizon_are_skipped_on_first_sight(log_dir: Path):
    old, cur = log_dir / name_for("20250102_03"), log_dir / name_for("20250102_09")
    append(old, line(rec("1", 1.0)))
    append(cur, line(rec("2", 2.0)))
    t = LogTailer(log_dir)
    ev = t.poll(horizon=hour_start("20250102_06"))
    assert ev.skipped == [old.name] and len(ev.lines) == 1
    append(old, line(rec("late", 3.0)))  # still tailed after the skip
    assert len(t.poll().lines) == 1


def test_unchanged_directory_reads_nothing(log_dir: Path):
    append(log_dir / name_for("20250102_03"), line(rec("1", 1.0)))
    (log_dir / "unrelated.txt").write_text("x\n")
    t = LogTailer(log_dir)
    assert len(t.poll().lines) == 1
    ev = t.poll()
    assert not (ev.lines or ev.truncated or ev.replaced or ev.deleted)
    assert LogTailer(log_dir / "missing").poll().lines == []
