"""Retention: mcp.events is partitioned by the day its stream started; CALL mcp.maintain drops a
whole day partition (DROP TABLE, no row-by-row DELETE) once its streams and their sessions ended
more than the retention ago, never while a session is live or a stream open; the gateway's
stream of today still replays. The sweep makes missing partitions ahead (tests/stack graceful
starts a new sweep, which runs the job at once)."""

from __future__ import annotations

import secrets
import subprocess
import threading

import psycopg2

from conftest import REPO, database
from waiting import wait_for

# A session and one stream of day `days` ago with its four rows; returns the stream id.
OLD_STREAM = """
WITH t AS (SELECT now() - make_interval(days => %(days)s) AS at),
se AS (
  INSERT INTO mcp.sessions (id, backend_url, protocol_version, created_at, last_seen_at,
                            terminated_at, terminated_by)
  SELECT %(sid)s, 'http://old/mcp', '2025-06-18', t.at, t.at,
         CASE WHEN %(live)s THEN NULL ELSE t.at END, CASE WHEN %(live)s THEN NULL ELSE 'client' END
    FROM t RETURNING id),
st AS (
  INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, method, status,
                           created_at, completed_at, lease_until)
  SELECT mcp.stream_id_at(t.at) + (random() * 1000000)::bigint, se.id, 'request', '1', '1',
         'tools/call', CASE WHEN %(open)s THEN 'open' ELSE 'complete' END, t.at,
         CASE WHEN %(open)s THEN NULL ELSE t.at END, now() + interval '1 hour'
    FROM t, se RETURNING id, session_id)
INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text, message,
                        created_at)
SELECT st.session_id, st.id, v.seq, v.d, v.k, v.m, v.m::jsonb, t.at
  FROM t, st, (VALUES (0, 'in', 'message', '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}'),
                      (1, 'out', 'priming', NULL),
                      (2, 'out', 'message', '{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'))
       AS v(seq, d, k, m)
RETURNING stream_id
"""


def old_stream(pg, days, live=False, open_=False):
    cur = pg.cursor()
    cur.execute("SELECT mcp.partition_create(((now() - make_interval(days => %s)) AT TIME ZONE 'UTC')::date)",
                (days,))
    cur.execute(OLD_STREAM, {"days": days, "sid": secrets.token_urlsafe(24), "live": live, "open": open_})
    return cur.fetchone()[0]


def partition_of(pg, stream_id):
    cur = pg.cursor()
    cur.execute("SELECT name FROM mcp.event_partitions WHERE %s >= lo AND %s < hi", (stream_id, stream_id))
    row = cur.fetchone()
    return row[0] if row else None


def exists(pg, table):
    cur = pg.cursor()
    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f"mcp.{table}",))
    return cur.fetchone()[0]


def count(pg, sql, *args):
    cur = pg.cursor()
    cur.execute(sql, args)
    return cur.fetchone()[0]


def test_expired_partition_dropped_live_rows_stay(mcp, pg):
    expired = old_stream(pg, 10)                      # ended 10 days ago: goes
    live_session = old_stream(pg, 11, live=True)      # its session is still live: stays
    open_stream = old_stream(pg, 12, open_=True)      # still open: stays
    gone, kept1, kept2 = (partition_of(pg, x) for x in (expired, live_session, open_stream))
    assert gone and kept1 and kept2 and len({gone, kept1, kept2}) == 3

    # A stream of today, through the gateway.
    s = mcp()
    s.initialize()
    events = list(s.request_stream("tools/call", {"name": "echo", "arguments": {"text": "kept"}}))
    last = [e.id for e in events if e.id][-1]
    today = partition_of(pg, int(last.split("-")[0]))
    assert today

    cur = pg.cursor()
    cur.execute("CALL mcp.maintain(interval '2 days')")
    created, dropped, deleted = cur.fetchone()
    assert dropped >= 1
    assert deleted >= 2                               # the expired stream's row and its session's
    assert not exists(pg, gone)                       # dropped whole, not emptied row by row
    assert exists(pg, kept1) and exists(pg, kept2) and exists(pg, today)
    assert count(pg, "SELECT count(*) FROM mcp.streams WHERE id = %s", expired) == 0
    assert count(pg, "SELECT count(*) FROM mcp.events WHERE stream_id = %s", expired) == 0
    for kept in (live_session, open_stream):
        assert count(pg, "SELECT count(*) FROM mcp.events WHERE stream_id = %s", kept) == 3
    # The expired stream's session went after it; the live one stays.
    assert count(pg, "SELECT count(*) FROM mcp.sessions WHERE id = (SELECT session_id FROM "
                 "mcp.streams WHERE id = %s)", live_session) == 1

    # Today's stream replays as before.
    first = [e.id for e in events if e.id][0]
    replayed = [e.id for e in s.get_stream(last_event_id=first)]
    assert replayed and replayed[-1] == last

    # Once the live session ends and the open stream is finished, a later run drops both.
    pg.cursor().execute("UPDATE mcp.sessions SET terminated_at = now() - interval '5 days' "
                        "WHERE id IN (SELECT session_id FROM mcp.streams WHERE id IN (%s, %s))",
                        (live_session, open_stream))
    pg.cursor().execute("UPDATE mcp.streams SET status = 'failed', completed_at = now() - interval '5 days' "
                        "WHERE id = %s", (open_stream,))
    cur.execute("CALL mcp.maintain(interval '2 days')")
    assert cur.fetchone()[1] >= 2
    assert not exists(pg, kept1) and not exists(pg, kept2) and exists(pg, today)


def test_sweep_makes_partitions_ahead(stack, pg):
    cur = pg.cursor()
    cur.execute("SELECT name FROM mcp.event_partitions ORDER BY day DESC LIMIT 1")
    last = cur.fetchone()[0]
    assert count(pg, f"SELECT count(*) FROM mcp.{last}") == 0   # a future day's: empty
    cur.execute(f"DROP TABLE mcp.{last}")
    # A graceful restart starts a new sweep, which runs the job at once.
    subprocess.run([str(REPO / "tests" / "stack"), "graceful", "--dir", stack["MCP_STACK_DIR"]],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120)
    wait_for(lambda: exists(pg, last), timeout=30, what=f"the sweep to make {last} again")


# A 2026-07-28 (stateless) stream of day `days` ago: no session, its revision on the stream;
# and an inbound notification of no session and no stream stored then. Returns the stream id.
STATELESS_STREAM = """
WITH t AS (SELECT now() - make_interval(days => %(days)s) AS at),
st AS (
  INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, method, status,
                           created_at, completed_at, lease_until, protocol_version)
  SELECT mcp.stream_id_at(t.at) + (random() * 1000000)::bigint, NULL, 'request', '1', '1',
         'tools/call', CASE WHEN %(open)s THEN 'open' ELSE 'cancelled' END, t.at,
         CASE WHEN %(open)s THEN NULL ELSE t.at END, now() + interval '1 hour', '2026-07-28'
    FROM t RETURNING id),
n AS (
  INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text, message,
                          created_at)
  SELECT NULL, NULL, NULL, 'in', 'message', %(note)s, %(note)s::jsonb, t.at FROM t)
INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text, message,
                        created_at)
SELECT NULL, st.id, 0, 'in', 'message', v.m, v.m::jsonb, t.at
  FROM t, st, (VALUES ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}')) AS v(m)
RETURNING stream_id
"""


def stateless_stream(pg, days, note, open_=False):
    cur = pg.cursor()
    cur.execute("SELECT mcp.partition_create(((now() - make_interval(days => %s)) AT TIME ZONE 'UTC')::date)",
                (days,))
    cur.execute(STATELESS_STREAM, {"days": days, "open": open_, "note": note})
    return cur.fetchone()[0]


def test_stateless_streams_expire_without_a_session(stack, pg):
    old_note = '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"old"}}'
    new_note = '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"new"}}'
    ended = stateless_stream(pg, 20, old_note)              # ended 20 days ago: goes
    still_open = stateless_stream(pg, 21, new_note, open_=True)
    # The notification of the open stream's day is as old: make it recent, so that it stays.
    pg.cursor().execute("UPDATE mcp.events SET created_at = now() WHERE stream_id IS NULL "
                        "AND message_text = %s", (new_note,))
    gone, kept = partition_of(pg, ended), partition_of(pg, still_open)
    assert gone and kept and gone != kept

    cur = pg.cursor()
    cur.execute("CALL mcp.maintain(interval '2 days')")
    assert cur.fetchone()[1] >= 1
    assert not exists(pg, gone) and exists(pg, kept)
    assert count(pg, "SELECT count(*) FROM mcp.streams WHERE id = %s", ended) == 0
    assert count(pg, "SELECT count(*) FROM mcp.events WHERE stream_id = %s", still_open) == 1
    assert count(pg, "SELECT count(*) FROM mcp.events WHERE message_text = %s", old_note) == 0
    assert count(pg, "SELECT count(*) FROM mcp.events WHERE message_text = %s", new_note) == 1


# partition_create in a thread of its own connection: its answer or its error, and its backend's
# pid, for pg_stat_activity.
class PartitionCreate(threading.Thread):
    def __init__(self, stack, day_offset):
        super().__init__(daemon=True)
        self.stack, self.day_offset = stack, day_offset
        self.pid = self.result = self.error = None
        self.ready = threading.Event()

    def run(self):
        with database(self.stack) as conn:
            cur = conn.cursor()
            cur.execute("SELECT pg_backend_pid()")
            self.pid = cur.fetchone()[0]
            self.ready.set()
            try:
                cur.execute("SELECT mcp.partition_create((now() AT TIME ZONE 'UTC')::date + %s)",
                            (self.day_offset,))
                self.result = cur.fetchone()[0]
            except psycopg2.Error as e:
                self.error = e


def waiting_on(pg, pid):
    cur = pg.cursor()
    cur.execute("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s", (pid,))
    row = cur.fetchone()
    return row if row and row[0] else None


def partition_day(pg, day_offset):
    cur = pg.cursor()
    cur.execute("SELECT 'events_' || to_char((now() AT TIME ZONE 'UTC')::date + %s, 'YYYYMMDD')",
                (day_offset,))
    return cur.fetchone()[0]


def test_partition_create_beside_a_transaction_that_wrote_a_stream(stack, pg):
    """CI: a transaction that wrote mcp.streams and then read mcp.events_default, while the job
    attached a partition (ATTACH holds the default partition, then wants mcp.streams): 'deadlock
    detected', in which PostgreSQL may abort the gateway's transaction. partition_create takes
    mcp.streams first now: it waits for the writer, and the writer's read goes on."""
    day = partition_day(pg, 61)
    with database(stack) as writer:
        writer.autocommit = False
        cur = writer.cursor()
        cur.execute("LOCK TABLE mcp.streams IN ROW EXCLUSIVE MODE")     # as an UPDATE takes it
        job = PartitionCreate(stack, 61)
        job.start()
        assert job.ready.wait(20)
        wait_for(lambda: waiting_on(pg, job.pid) == ("Lock", "relation"), what="the job to wait")
        cur.execute("SET LOCAL lock_timeout = '10s'")
        cur.execute("SELECT count(*) FROM mcp.events_default")         # deadlocked here before
        writer.commit()
    job.join(20)
    assert not job.is_alive() and job.error is None and job.result is True
    assert exists(pg, day)
    pg.cursor().execute(f"DROP TABLE mcp.{day}")


def waits_for(pg, pid, table):
    cur = pg.cursor()
    cur.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted "
                "AND relation = %s::regclass", (pid, table))
    return cur.fetchone()[0] > 0


def test_partition_create_lets_go_while_the_default_partition_is_busy(stack, pg):
    """A transaction reading mcp.events_default that then writes mcp.streams: the job, waiting
    for the default partition while it holds mcp.streams, lets both go before deadlock_timeout,
    so the transaction's write goes on (a plain wait there would be the same deadlock), and it
    tries again once the transaction ended."""
    day = partition_day(pg, 62)
    with database(stack) as reader:
        reader.autocommit = False
        cur = reader.cursor()
        cur.execute("SELECT count(*) FROM mcp.events_default")
        job = PartitionCreate(stack, 62)
        job.start()
        assert job.ready.wait(20)
        wait_for(lambda: waits_for(pg, job.pid, "mcp.events_default"),
                 what="the job to wait for the default partition")
        cur.execute("SET LOCAL lock_timeout = '10s'")
        cur.execute("LOCK TABLE mcp.streams IN ROW EXCLUSIVE MODE")
        reader.commit()
    job.join(20)
    assert not job.is_alive() and job.error is None and job.result is True
    assert exists(pg, day)
    pg.cursor().execute(f"DROP TABLE mcp.{day}")


# Foreign keys of mcp's tables whose referencing columns lead no index of their table: deleting
# a referenced row (retention deletes streams and sessions by the thousand) then scans the whole
# referencing table once per row. Partitions of mcp.events inherit their parent's indexes.
UNINDEXED_FOREIGN_KEYS = """
SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
  FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
 WHERE c.contype = 'f' AND n.nspname = 'mcp'
   AND NOT EXISTS (
       SELECT 1 FROM pg_index i
        WHERE i.indrelid = c.conrelid
          AND (i.indkey::int2[])[0:cardinality(c.conkey) - 1] @> c.conkey
          AND (i.indkey::int2[])[0:cardinality(c.conkey) - 1] <@ c.conkey)
 ORDER BY 1, 2
"""


def test_every_foreign_key_has_an_index_on_its_columns(pg):
    """mcp.streams.bridged_to (ON DELETE SET NULL) had none: mcp.maintain's batched stream
    deletes grew with the square of the table (500,000 events: over five minutes)."""
    with pg.cursor() as c:
        c.execute(UNINDEXED_FOREIGN_KEYS)
        assert c.fetchall() == []


def test_maintain_deletes_free_stream_slots_and_keeps_held_ones(stack, pg):
    """A stream slot whose stream ended (or never was inserted: an admission refused by a later
    limit) is deleted by the job; a slot whose stream is open stays, and so does its count: the
    session is still at its limit afterwards."""
    cur = pg.cursor()
    sid = secrets.token_urlsafe(24)
    scope = f"session:{sid}"
    cur.execute("INSERT INTO mcp.sessions (id, backend_url, protocol_version) "
                "VALUES (%s, 'http://x/mcp', '2025-06-18')", (sid,))
    ids = []
    for _ in range(2):   # the first one's stream is inserted, the second one's never
        cur.execute("SELECT mcp.stream_id_new()")
        ids.append(cur.fetchone()[0])
        cur.execute("SELECT mcp.admit_stream(%s, NULL, 0, 2, 0, 0, %s, NULL)", (sid, ids[-1]))
        assert cur.fetchone()[0] is None
        if len(ids) == 1:
            cur.execute("INSERT INTO mcp.streams (id, session_id, kind, lease_until) "
                        "VALUES (%s, %s, 'standalone', now() + interval '1 hour')", (ids[0], sid))
    cur.execute("SELECT count(*) FROM mcp.stream_slots WHERE scope = %s", (scope,))
    assert cur.fetchone()[0] == 2
    cur.execute("CALL mcp.maintain()")
    cur.execute("SELECT stream_id FROM mcp.stream_slots WHERE scope = %s", (scope,))
    assert cur.fetchall() == [(ids[0],)]
    # The open stream still holds its slot: one more is admitted, not two.
    cur.execute("WITH i AS (SELECT mcp.stream_id_new() AS id), "
                "a AS (SELECT i.id, mcp.admit_stream(%s, NULL, 0, 2, 0, 0, i.id, NULL) AS r FROM i) "
                "INSERT INTO mcp.streams (id, session_id, kind, request_id_text, request_id, "
                "                         method, lease_until) "
                "SELECT a.id, %s, 'request', '1', '1', 'ping', now() + interval '1 hour' "
                "  FROM a WHERE a.r IS NULL RETURNING id", (sid, sid))
    assert cur.fetchone()
    cur.execute("SELECT mcp.admit_stream(%s, NULL, 0, 2, 0, 0, mcp.stream_id_new(), NULL)", (sid,))
    assert cur.fetchone()[0] == "session-streams"
    cur.execute("UPDATE mcp.streams SET status = 'closed', completed_at = now() "
                "WHERE session_id = %s", (sid,))
    cur.execute("UPDATE mcp.sessions SET terminated_at = now(), terminated_by = 'client' "
                "WHERE id = %s", (sid,))


def test_maintain_analyzes_sessions_and_streams_whose_statistics_are_old(stack, pg):
    """mcp.maintain analyzes mcp.sessions and mcp.streams when neither it nor autovacuum did in
    the last five minutes (autovacuum waits for a tenth of a table to change, and on a big one
    the share of live sessions and open streams that the planner prices the partial indexes by
    can change tenfold before that), and leaves them alone within those five minutes (every
    host's sweep runs the job)."""
    admin = psycopg2.connect(stack["MCP_PG_ADMIN"].replace("dbname=postgres", "dbname=mcp"))
    admin.autocommit = True
    tables = ("sessions", "streams")

    def analyses():
        """Each table's manual analyses since its counters were reset."""
        cur = pg.cursor()
        cur.execute("SELECT relname, analyze_count FROM pg_stat_user_tables"
                    " WHERE schemaname = 'mcp' AND relname IN ('sessions', 'streams')")
        return dict(cur.fetchall())

    try:
        with admin.cursor() as cur:
            for t in tables:   # as if never analyzed (the counters and their times)
                cur.execute("SELECT pg_stat_reset_single_table_counters(%s::regclass)", (f"mcp.{t}",))
        assert analyses() == {"sessions": 0, "streams": 0}
        pg.cursor().execute("CALL mcp.maintain()")
        first = analyses()
        assert first["sessions"] >= 1 and first["streams"] >= 1, first
        pg.cursor().execute("CALL mcp.maintain()")
        assert analyses() == first
    finally:
        admin.close()
