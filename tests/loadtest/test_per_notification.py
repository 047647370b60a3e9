"""The soak's figures per notification: CPU by kind of process, row versions by table, and
PostgreSQL's statements."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import sessionmaker

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

import pg_writes
from soak import process_kinds
from statements import Statement, shape, since, table
from usage import ALL_PROCESSES, RoleUsage, ms_per_notification
from workload import Layout

ROLES = ["api", "worker1", "worker2", "beat", "postgres", "redis", "provider", "load"]


def usage(**cpu_seconds: float) -> dict[str, RoleUsage]:
    """A sample's usage: each role's CPU seconds so far (its share and memory do not count here)."""
    return {role: RoleUsage(cpu_percent=0.0, cpu_seconds=seconds, rss_mb=0.0) for role, seconds in cpu_seconds.items()}


def test_workers_are_named_by_stage_when_split_and_the_other_roles_by_what_they_are():
    split = process_kinds(ROLES, Layout(workers=2, split_stages=True))
    assert list(split.values()) == [
        "API",
        "prepare worker",
        "deliver worker",
        "beat",
        "PostgreSQL",
        "Redis",
        "fake provider",
        "load generator",
    ]
    assert process_kinds(["worker1", "worker2"], Layout(workers=2)) == {
        "worker1": "worker (all stages)",
        "worker2": "worker (all stages)",
    }


def test_cpu_per_notification_adds_up_the_roles_of_a_kind_and_all_processes_come_last():
    kinds = {"api": "API", "worker1": "prepare worker", "worker3": "prepare worker", "postgres": "PostgreSQL"}
    before = usage(api=10.0, worker1=1.0, worker3=2.0, postgres=5.0)
    after = usage(api=13.0, worker1=1.5, worker3=2.5, postgres=7.0)
    found = ms_per_notification(before, after, kinds, 1000)
    assert found == pytest.approx({"API": 3.0, "prepare worker": 1.0, "PostgreSQL": 2.0, ALL_PROCESSES: 6.0})
    assert list(found) == ["API", "prepare worker", "PostgreSQL", ALL_PROCESSES]


def test_a_role_whose_total_fell_counts_nothing_and_no_notification_is_an_error():
    # A tree's total falls when a child it had not reaped yet goes: no negative CPU.
    assert ms_per_notification(usage(api=5.0), usage(api=4.0), {"api": "API"}, 10) == {"API": 0.0, ALL_PROCESSES: 0.0}
    with pytest.raises(ValueError):
        ms_per_notification(usage(api=5.0), usage(api=6.0), {"api": "API"}, 0)


def test_lists_of_parameters_of_any_length_are_one_shape():
    assert shape("SELECT 1 FROM m\n  WHERE id IN ($1, $2,$3)") == "SELECT 1 FROM m WHERE id IN ($…)"
    assert shape("SELECT 1 FROM m WHERE id IN ($1)") == "SELECT 1 FROM m WHERE id IN ($…)"
    assert shape("INSERT INTO e (a, b) VALUES ($1, $2), ($3, $4), ($5, $6)") == "INSERT INTO e (a, b) VALUES ($…), …"
    assert shape("INSERT INTO e (a, b) VALUES ($1, $2), ($3, $4)") == "INSERT INTO e (a, b) VALUES ($…), …"


def test_since_subtracts_the_earlier_snapshot_and_merges_shapes():
    before = {1: Statement("SELECT a FROM t WHERE id IN ($1)", 10, 5.0, 10, 30), 3: Statement("COMMIT", 4, 0.1, 0, 0)}
    after = {
        1: Statement("SELECT a FROM t WHERE id IN ($1)", 25, 12.0, 25, 75),
        2: Statement("SELECT a FROM t WHERE id IN ($1, $2)", 5, 3.0, 10, 20),  # first seen in between
        3: Statement("COMMIT", 4, 0.1, 0, 0),  # not run in between
    }
    assert since(before, after) == [Statement("SELECT a FROM t WHERE id IN ($…)", 20, 10.0, 25, 65)]


def test_the_table_shows_the_top_by_time_and_the_frequent_per_notification_and_all_statements_last():
    found = [
        Statement("COMMIT", 400, 20.0, 0, 0),  # twice a notification: shown though not in the top 2
        Statement("UPDATE m SET s = $… WHERE id = ANY($…)", 20, 300.0, 200, 1000),
        Statement("SELECT a || b FROM t", 200, 100.0, 200, 400),
        Statement("DELETE FROM d", 20, 10.0, 20, 20),  # neither
    ]
    lines = table(found, notifications=200, top=2)
    assert lines[0].startswith("| statement | calls/notif. | total ms | ms/notif. | mean ms | rows/notif.")
    assert lines[2:] == [
        "| `UPDATE m SET s = $… WHERE id = ANY($…)` | 0.100 | 300 | 1.500 | 15.000 | 1.00 | 5.0 |",
        r"| `SELECT a \|\| b FROM t` | 1.000 | 100 | 0.500 | 0.500 | 1.00 | 2.0 |",
        "| `COMMIT` | 2.000 | 20 | 0.100 | 0.050 | 0.00 | 0.0 |",
        "| all 4 statements | 3.200 | 430 | 2.150 | 0.672 | 2.10 | 7.1 |",
    ]
    with pytest.raises(ValueError):
        table(found, notifications=0)


def test_a_long_statement_is_cut_to_the_width_of_the_table():
    [row] = table([Statement("SELECT " + "x, " * 60 + "y FROM t", 1, 1.0, 1, 1)], notifications=1)[2:3]
    shown = row.split("`")[1]
    assert len(shown) == 100 and shown.endswith("…")


def test_row_versions_count_what_postgresql_wrote_to_each_table_and_which_updates_were_hot(engine):
    db = sessionmaker(engine)
    with db() as session:  # fillfactor 50: an update of an unindexed column finds room on its page
        session.execute(text("CREATE TABLE row_versions_probe (id int PRIMARY KEY, note text) WITH (fillfactor = 50)"))
        session.commit()
    try:
        before = pg_writes.snapshot(db)
        with db() as session:
            session.execute(text("INSERT INTO row_versions_probe SELECT n, 'a' FROM generate_series(1, 10) n"))
            session.execute(text("UPDATE row_versions_probe SET note = 'b'"))  # 10 HOT
            session.execute(text("UPDATE row_versions_probe SET id = id + 100 WHERE id <= 4"))  # 4 not HOT
            session.execute(text("DELETE FROM row_versions_probe WHERE id IN (9, 10)"))
            session.execute(text("SELECT pg_stat_force_next_flush()"))  # flushed as the session goes idle
            session.commit()
        written = pg_writes.since(before, pg_writes.snapshot(db))
    finally:
        with db() as session:
            session.execute(text("DROP TABLE row_versions_probe"))
            session.commit()
    assert written.tables["row_versions_probe"] == pg_writes.Writes(inserted=10, updated=14, hot=10, deleted=2)
    assert written.tables["row_versions_probe"].versions == 24
    assert written.wal_bytes > 0


def test_the_writes_table_shows_the_tables_written_most_per_notification_all_tables_last_then_the_wal():
    tables = {
        "messages": pg_writes.Writes(inserted=100, updated=300, hot=75, deleted=0),
        "events": pg_writes.Writes(inserted=30, updated=0, hot=0, deleted=10),
        "projects": pg_writes.Writes(inserted=0, updated=0, hot=0, deleted=0),  # below SHOWN
    }
    written = pg_writes.Written(tables, wal_bytes=350_000, full_pages=25)
    assert pg_writes.table(written, notifications=100) == [
        "| table | row versions/notif. | inserted | updated | of them HOT | deleted |",
        "|---|---:|---:|---:|---:|---:|",
        "| `messages` | 4.00 | 1.00 | 3.00 | 25% | 0.00 |",
        "| `events` | 0.30 | 0.30 | 0.00 | — | 0.10 |",
        "| all 3 tables | 4.30 | 1.30 | 3.00 | 25% | 0.10 |",
        "",
        "WAL: 3,500 bytes per notification, 0.25 whole pages logged (full-page images)",
    ]
    with pytest.raises(ValueError):
        pg_writes.table(written, notifications=0)
