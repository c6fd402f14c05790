-- mod_mcp retention: the partitions of mcp.events and the job that creates and drops them.
-- Loaded by schema.sql and by migration 003 (safe to re-run: CREATE OR REPLACE only).
--
-- mcp.events is partitioned by RANGE (stream_id), one partition per UTC day of the streams'
-- start (mcp.events_YYYYMMDD): a stream's id carries its start time (mcp.stream_id_new:
-- epoch seconds * 1,000,000 + a counter), so the range of ids of one day is known in advance
-- and every row of a stream lies in the partition of the day it started. Rows of no stream
-- (the initialize exchange, inbound notifications and responses) and rows of streams older
-- than the first partition (an upgraded database's) are in mcp.events_default.
--
-- The job, run by the gateway's sweep (MCPRetention) or from cron:
--     psql "dbname=mcp" -c "CALL mcp.maintain(interval '30 days')"
-- creates the partitions of the next days ahead of time and drops a day's partition whole
-- (DROP TABLE, never row by row) once that day is older than the retention and every stream in
-- it, and every session that owns one, ended more than the retention ago: live sessions and
-- open streams are never cut. It then deletes the small rows that pointed into it (mcp.streams,
-- then sessions that have nothing left) in batches, and the expired rows of mcp.events_default.

-- A new stream id: the start second and a counter (unique unless a million streams start in
-- one second).
CREATE OR REPLACE FUNCTION mcp.stream_id_new() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT floor(extract(epoch FROM now()))::bigint * 1000000
           + nextval('mcp.streams_id_seq') % 1000000
$$;

-- The first stream id of a time (for the bounds of a day's partition).
CREATE OR REPLACE FUNCTION mcp.stream_id_at(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT floor(extract(epoch FROM t))::bigint * 1000000
$$;

-- The partition of the streams started on day (UTC), created and attached if missing. Returns
-- true when it was created. ATTACH (not CREATE ... PARTITION OF) takes only a SHARE UPDATE
-- EXCLUSIVE lock on mcp.events, which the gateway's statements never wait for; it does scan
-- mcp.events_default for rows of that day (there are none unless the job has not run: then the
-- attach fails with check_violation and that day's rows stay in the default partition).
CREATE OR REPLACE FUNCTION mcp.partition_create(day date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    name text := 'events_' || to_char(day, 'YYYYMMDD');
    lo bigint := mcp.stream_id_at(day::timestamp AT TIME ZONE 'UTC');
    hi bigint := mcp.stream_id_at((day + 1)::timestamp AT TIME ZONE 'UTC');
    give_up timestamptz := clock_timestamp() + interval '5 seconds';
    prior_lock_timeout text := current_setting('lock_timeout');
    attempt int := 0;
BEGIN
    IF to_regclass('mcp.' || name) IS NOT NULL THEN
        RETURN false;
    END IF;
    -- The attach locks mcp.events_default (ACCESS EXCLUSIVE, for its scan) and then mcp.streams
    -- (SHARE ROW EXCLUSIVE, for the foreign key it clones). The gateway's transactions take
    -- them the other way round (a stream's row written, then events read or stored; a prepared
    -- statement on mcp.events locks every partition): waiting for mcp.streams while holding the
    -- default partition was a deadlock, in which PostgreSQL could abort the gateway's
    -- transaction. So mcp.streams is taken first, holding nothing, and the default partition
    -- with a wait shorter than deadlock_timeout: when it is not had by then, both are let go
    -- (the gateway's transaction that waited for mcp.streams goes on) and tried again.
    LOOP
        attempt := attempt + 1;
        BEGIN
            LOCK TABLE mcp.streams IN SHARE ROW EXCLUSIVE MODE;
            PERFORM set_config('lock_timeout', '100ms', true);
            -- The parent before the default partition, as a DROP of a partition takes them.
            LOCK TABLE mcp.events IN SHARE UPDATE EXCLUSIVE MODE;
            LOCK TABLE mcp.events_default IN ACCESS EXCLUSIVE MODE;
            PERFORM set_config('lock_timeout', prior_lock_timeout, true);
            -- Another run (another host) may have made it while this one waited.
            IF to_regclass('mcp.' || name) IS NOT NULL THEN
                RETURN false;
            END IF;
            EXECUTE format('CREATE TABLE mcp.%I (LIKE mcp.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                           name);
            EXECUTE format('ALTER TABLE mcp.events ATTACH PARTITION mcp.%I FOR VALUES FROM (%s) TO (%s)',
                           name, lo, hi);
            RETURN true;
        EXCEPTION WHEN lock_not_available THEN
            IF clock_timestamp() >= give_up THEN
                RAISE EXCEPTION 'mcp.partition_create: % not created: mcp.streams and '
                                'mcp.events_default were busy for % attempts', name, attempt
                    USING ERRCODE = 'lock_not_available';
            END IF;
        END;
        PERFORM pg_sleep(0.005 * least(attempt, 20) * (0.5 + random()));
    END LOOP;
END
$$;

-- The day partitions of mcp.events: name, day, and the stream ids they hold [lo, hi).
CREATE OR REPLACE VIEW mcp.event_partitions AS
SELECT c.relname AS name,
       to_date(substr(c.relname, 8), 'YYYYMMDD') AS day,
       mcp.stream_id_at(to_date(substr(c.relname, 8), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC') AS lo,
       mcp.stream_id_at((to_date(substr(c.relname, 8), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC') AS hi,
       pg_total_relation_size(c.oid) AS bytes
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'mcp.events'::regclass AND c.relname ~ '^events_[0-9]{8}$';

-- May the day partition of streams [lo, hi) go? Not while a stream in it is open or ended after
-- cutoff, nor while a session owning one is live or ended after cutoff (a 2026-07-28 stream has
-- no session: only its own end counts).
CREATE OR REPLACE FUNCTION mcp.partition_expired(lo bigint, hi bigint, cutoff timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM mcp.streams s LEFT JOIN mcp.sessions se ON se.id = s.session_id
         WHERE s.id >= lo AND s.id < hi
           AND (s.status = 'open' OR s.completed_at IS NULL OR s.completed_at >= cutoff
                OR (se.id IS NOT NULL AND (se.terminated_at IS NULL OR se.terminated_at >= cutoff))))
$$;

-- Runs stmt (a DELETE of at most $2 rows, all older than $1) with cutoff and a batch of 5,000
-- again and again, committing after each batch, until it deletes nothing; adds the rows it
-- deleted to deleted. Each batch is a short transaction, so the gateway's statements never wait
-- long behind it. Committing needs a CALL chain from the top level (as mcp.maintain is run).
CREATE OR REPLACE PROCEDURE mcp.delete_batched(stmt text, cutoff timestamptz,
                                               INOUT deleted bigint)
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    LOOP
        EXECUTE stmt USING cutoff, 5000;
        GET DIAGNOSTICS n = ROW_COUNT;
        deleted := deleted + n;
        COMMIT;
        EXIT WHEN n = 0;
    END LOOP;
END
$$;

-- The job. retention: how long rows stay after their stream and session ended (NULL: for ever,
-- only partitions are created); ahead: days of partitions made in advance; now: the time it
-- counts from (tests). Each step commits on its own and waits at most lock_timeout (1 s) for a
-- lock, so the gateway's statements are never held up long: a drop that cannot have its lock is
-- tried again on the next run. Runs on several hosts at once are harmless (what one did, the
-- other skips). A CALL inside a transaction block is refused by PostgreSQL (the steps commit).
-- created/dropped/deleted count what it did (partitions; rows of streams, sessions and
-- mcp.events_default).
CREATE OR REPLACE PROCEDURE mcp.maintain(retention interval DEFAULT NULL, ahead int DEFAULT 3,
                                         now timestamptz DEFAULT now(),
                                         INOUT created int DEFAULT 0, INOUT dropped int DEFAULT 0,
                                         INOUT deleted bigint DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
    d date;
    part record;
    cutoff timestamptz := now - retention;
    t timestamptz;
    tbl name;
    slots_freed bigint := 0;
BEGIN
    created := 0; dropped := 0; deleted := 0;
    FOR d IN SELECT generate_series((now AT TIME ZONE 'UTC')::date,
                                    (now AT TIME ZONE 'UTC')::date + ahead, '1 day')::date LOOP
        PERFORM set_config('lock_timeout', '1s', true);
        BEGIN
            IF mcp.partition_create(d) THEN
                created := created + 1;
            END IF;
        -- lock_not_available: mcp.streams and mcp.events_default stayed busy (partition_create
        -- lets them go rather than wait long holding one). A deadlock it still meets (DDL run
        -- beside it by hand, say) only skips that day too. The next run creates it.
        EXCEPTION WHEN check_violation OR lock_not_available OR duplicate_table
                       OR deadlock_detected THEN
            RAISE NOTICE 'mcp.maintain: partition of % not created: %', d, SQLERRM;
        END;
        COMMIT;
    END LOOP;
    -- Free stream slots (their stream or follower ended): a session or holder makes them
    -- again when it needs them. A slot being claimed is locked and skipped.
    CALL mcp.delete_batched($q$
        DELETE FROM mcp.stream_slots WHERE (scope, n) IN (
            SELECT scope, n FROM mcp.stream_slots sl
             WHERE NOT mcp.slot_held(sl.stream_id, sl.follower_id)
             LIMIT $2 FOR UPDATE SKIP LOCKED)$q$, now, slots_freed);
    IF retention IS NOT NULL THEN
        FOR part IN SELECT * FROM mcp.event_partitions
                  WHERE mcp.stream_id_at(cutoff) >= hi ORDER BY lo LOOP
            PERFORM set_config('lock_timeout', '1s', true);
            BEGIN
                IF mcp.partition_expired(part.lo, part.hi, cutoff) THEN
                    t := clock_timestamp();
                    EXECUTE format('DROP TABLE mcp.%I', part.name);
                    dropped := dropped + 1;
                    RAISE NOTICE 'mcp.maintain: dropped % (% bytes) in % ms', part.name, part.bytes,
                        round(extract(epoch FROM clock_timestamp() - t) * 1000, 1);
                END IF;
            EXCEPTION WHEN lock_not_available OR undefined_table THEN
                RAISE NOTICE 'mcp.maintain: % not dropped this time: %', part.name, SQLERRM;
            END;
            COMMIT;
        END LOOP;
        -- Expired streams outside every day partition: their rows went with a dropped
        -- partition, or are in mcp.events_default (then deleted with the stream; few).
        CALL mcp.delete_batched($q$
            DELETE FROM mcp.streams WHERE id IN (
                SELECT s.id FROM mcp.streams s LEFT JOIN mcp.sessions se ON se.id = s.session_id
                 WHERE s.id < mcp.stream_id_at($1)   -- started before it: the PK's range
                   AND NOT EXISTS (SELECT 1 FROM mcp.event_partitions p
                                    WHERE s.id >= p.lo AND s.id < p.hi)
                   AND s.status <> 'open' AND s.completed_at < $1
                   AND (se.id IS NULL OR se.terminated_at < $1)
                 LIMIT $2)$q$, cutoff, deleted);
        -- Rows of no session and no stream (the inbound notifications of 2026-07-28 clients,
        -- in mcp.events_default) stored before the cutoff.
        CALL mcp.delete_batched($q$
            DELETE FROM mcp.events_default WHERE id IN (
                SELECT e.id FROM mcp.events_default e
                 WHERE e.session_id IS NULL AND e.stream_id IS NULL AND e.created_at < $1
                 LIMIT $2)$q$, cutoff, deleted);
        -- Sessions that ended before the cutoff and own no stream any more (their rows of no
        -- stream, in mcp.events_default, go with them).
        CALL mcp.delete_batched($q$
            DELETE FROM mcp.sessions WHERE id IN (
                SELECT se.id FROM mcp.sessions se
                 WHERE se.terminated_at < $1
                   AND NOT EXISTS (SELECT 1 FROM mcp.streams s WHERE s.session_id = se.id)
                 LIMIT $2)$q$, cutoff, deleted);
    END IF;
    -- Statistics of sessions and streams no older than a run (the sweep's, every 10 minutes) and
    -- five minutes: autovacuum analyzes a table again only once a tenth of it changed, and on a
    -- big one the share of live sessions and open streams (10,000 connected clients in the
    -- morning) can change tenfold before that; the planner prices the partial indexes by it
    -- (bench/before-after.md, issue 25, thirteenth pass). A table that another analysis or a
    -- VACUUM holds is left to the next run.
    FOR tbl IN SELECT relname FROM pg_stat_user_tables
                WHERE schemaname = 'mcp' AND relname IN ('sessions', 'streams')
                  AND coalesce(greatest(last_analyze, last_autoanalyze), '-infinity')
                      < clock_timestamp() - interval '5 minutes'
                ORDER BY relname LOOP
        PERFORM set_config('lock_timeout', '1s', true);
        BEGIN
            EXECUTE format('ANALYZE mcp.%I', tbl);
        EXCEPTION WHEN lock_not_available THEN
            RAISE NOTICE 'mcp.maintain: mcp.% not analyzed this time: %', tbl, SQLERRM;
        END;
        COMMIT;
    END LOOP;
END
$$;
