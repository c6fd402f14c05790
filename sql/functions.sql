-- mod_mcp's functions and triggers (loaded by schema.sql, and by upgrade.sql after the
-- migrations: CREATE OR REPLACE, and DROP IF EXISTS of what is gone; safe to re-run).

-- The JSON text with the escapes PostgreSQL cannot de-escape (\u0000, surrogates) as \ufffd:
-- what mcp.audit_jsonb casts when the plain cast fails, and what json operators that read
-- strings (->) can take (the json type keeps every number as written, so this never fails on
-- valid JSON).
CREATE OR REPLACE FUNCTION mcp.json_pg_safe(t text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT regexp_replace(t, '(?<!\\)((?:\\\\)*)\\u(0000|d[89ab][0-9a-f]{2}|d[c-f][0-9a-f]{2})',
                          '\1\\ufffd', 'gi')
$$;

-- Messages are stored as the exact text that crossed the wire (any valid JSON, RFC 8259); jsonb
-- copies serve queries and the audit views. jsonb cannot hold every valid JSON text: it refuses
-- \u0000 and lone surrogate escapes (\ud800), and it reorders keys and keeps only the last of
-- duplicate ones. This cast never fails a statement: where the plain cast fails, \u0000 and
-- lone or paired surrogate escapes become \ufffd (U+FFFD) and it tries again; NULL when even
-- that fails (e.g. a number beyond numeric's range). The exact text is always in *_text.
CREATE OR REPLACE FUNCTION mcp.audit_jsonb(t text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN t::jsonb;
EXCEPTION WHEN others THEN
    BEGIN
        RETURN mcp.json_pg_safe(t)::jsonb;
    EXCEPTION WHEN others THEN
        RETURN NULL;
    END;
END
$$;

-- Does a stream slot's occupant still hold it: its stream open with a live lease, or its
-- follower's lease live? An id whose row was never inserted (an admission refused by a later
-- limit) or is gone holds nothing. VOLATILE on purpose: a query in it takes a fresh snapshot,
-- so when mcp.slot_claim_among's FOR UPDATE re-checks a slot that a concurrent admission claimed and
-- committed meanwhile, the new occupant's stream is seen (an inlined SQL expression would judge
-- it with the statement's older snapshot and let two admissions share the slot).
CREATE OR REPLACE FUNCTION mcp.slot_held(p_stream bigint, p_follower bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_stream IS NOT NULL THEN
        -- By key, then status: "status = 'open'" beside the key lets stale statistics read
        -- every open stream (mod_mcp/mcp_store_event.c).
        RETURN coalesce((SELECT status = 'open' AND lease_until >= now() FROM mcp.streams
                          WHERE id = p_stream), false);
    END IF;
    RETURN p_follower IS NOT NULL
       AND EXISTS (SELECT 1 FROM mcp.followers WHERE id = p_follower AND lease_until >= now());
END
$$;

-- Claims one of the slots 1..p_max of p_scope for a stream (p_stream) or a follower
-- (p_follower), whose id is chosen before its row is inserted; false when all are held. A slot
-- being claimed by a transaction still in flight is skipped, never waited for (SKIP LOCKED):
-- concurrent admissions of one scope take different slots, and as each slot has one occupant
-- the scope never has more than p_max. A scope has as many slot rows as it had occupants at
-- once (at most p_max): new ones are inserted when none is free. p_pending: the streams that
-- the same statement admitted before this one (mcp.admit_streams), whose rows it has not
-- inserted yet: they hold the slots they were given (mcp.slot_held finds no row for them).
CREATE OR REPLACE FUNCTION mcp.slot_claim_among(p_scope text, p_max int, p_stream bigint,
                                                p_follower bigint, p_pending bigint[])
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    slot int;
    occupant bigint;
    occupant_follower bigint;
    alive boolean;
    passed int[] := '{}';
    taken int[];
BEGIN
    -- The common case in one statement, not two: the first slot not being claimed whose
    -- occupant this statement's snapshot sees ended (or that has none), claimed at once. FOR
    -- UPDATE re-checks a slot that a claim committed meanwhile against its new occupant, which
    -- this snapshot does not see: not taken here. Whatever this does not find (such a slot, an
    -- occupant the snapshot cannot judge, no slot row free) the loop below decides, as before.
    -- (A scalar sub-select, run once: as a joined sub-query the planner may run it again for
    -- every slot row of the scope, locking as it goes.)
    UPDATE mcp.stream_slots SET stream_id = p_stream, follower_id = p_follower
     WHERE scope = p_scope AND n = (
           SELECT sl.n FROM mcp.stream_slots sl
             WHERE sl.scope = p_scope AND sl.n <= p_max
               AND (sl.stream_id IS NULL OR sl.stream_id <> ALL (p_pending))
               AND ((sl.stream_id IS NULL AND sl.follower_id IS NULL)
                    OR (CASE WHEN sl.stream_id IS NOT NULL
                             THEN (SELECT s.status = 'open' AND s.lease_until >= now()
                                     FROM mcp.streams s WHERE s.id = sl.stream_id)
                             ELSE (SELECT f.lease_until >= now() FROM mcp.followers f
                                    WHERE f.id = sl.follower_id) END) IS FALSE)
             ORDER BY sl.n LIMIT 1 FOR UPDATE OF sl SKIP LOCKED);
    IF FOUND THEN
        RETURN true;
    END IF;
    LOOP
        -- The slots whose occupant is not alive as this statement's snapshot sees it (written
        -- out: a plpgsql call for each held slot passed before the first free one cost more
        -- than the lookup itself; a busy principal passes every call in flight). An occupant
        -- the snapshot does not see at all is only a candidate: its admission may have been
        -- refused (its row never inserted), or it took the slot and committed after the
        -- snapshot, and FOR UPDATE's re-check of the locked row judges the stream it names
        -- with this same snapshot. Once locked, such a slot is judged by mcp.slot_held (a
        -- fresh snapshot); one whose occupant was seen ended (the common case) needs no call.
        SELECT sl.n, sl.stream_id, sl.follower_id,
               CASE WHEN sl.stream_id IS NOT NULL
                    THEN (SELECT s.status = 'open' AND s.lease_until >= now() FROM mcp.streams s
                           WHERE s.id = sl.stream_id)
                    ELSE (SELECT f.lease_until >= now() FROM mcp.followers f
                           WHERE f.id = sl.follower_id) END
          INTO slot, occupant, occupant_follower, alive
          FROM mcp.stream_slots sl
         WHERE sl.scope = p_scope AND sl.n <= p_max AND sl.n <> ALL (passed)
           AND (sl.stream_id IS NULL OR sl.stream_id <> ALL (p_pending))
           AND (CASE WHEN sl.stream_id IS NOT NULL
                     THEN (SELECT s.status = 'open' AND s.lease_until >= now() FROM mcp.streams s
                            WHERE s.id = sl.stream_id)
                     ELSE (SELECT f.lease_until >= now() FROM mcp.followers f
                            WHERE f.id = sl.follower_id) END) IS NOT TRUE
         ORDER BY sl.n LIMIT 1 FOR UPDATE OF sl SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        IF alive IS NOT NULL OR NOT mcp.slot_held(occupant, occupant_follower) THEN
            UPDATE mcp.stream_slots SET stream_id = p_stream, follower_id = p_follower
             WHERE scope = p_scope AND n = slot;
            RETURN true;
        END IF;
        passed := passed || slot;   -- taken meanwhile: its new occupant holds it
    END LOOP;
    -- New slot numbers only: a unique check against a slot that a claim is updating would
    -- wait for its commit. And one that another transaction in flight inserts is skipped, not
    -- waited for: whoever inserts slot n holds a try-lock of it to the end of its transaction.
    SELECT coalesce(array_agg(sl.n), '{}') INTO taken FROM mcp.stream_slots sl
     WHERE sl.scope = p_scope;
    FOR slot IN 1 .. p_max LOOP
        IF slot <> ALL (taken)
           AND pg_try_advisory_xact_lock(hashtextextended(p_scope, slot)) THEN
            INSERT INTO mcp.stream_slots (scope, n, stream_id, follower_id)
            VALUES (p_scope, slot, p_stream, p_follower) ON CONFLICT DO NOTHING;
            IF FOUND THEN
                RETURN true;
            END IF;
        END IF;
    END LOOP;
    RETURN false;
END
$$;

-- mcp.slot_claim (slot_claim_among with nothing pending) had no caller but mcp.admit_stream.
DROP FUNCTION IF EXISTS mcp.slot_claim(text, int, bigint, bigint);

-- The slots of session p_session and of holder p_holder for one stream (p_stream) or follower
-- (p_follower) under limits max_per_session and max_per_holder (0: no limit); NULL, or the limit
-- that refused it: 'session-streams' or 'holder-streams'. A session slot claimed for one that
-- the holder refused holds nothing: its row is never inserted. p_pending: as in
-- mcp.slot_claim_among.
CREATE OR REPLACE FUNCTION mcp.slots_claim(p_session text, p_holder text, max_per_session int,
                                           max_per_holder int, p_stream bigint,
                                           p_follower bigint, p_pending bigint[])
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF max_per_session > 0
       AND NOT mcp.slot_claim_among('session:' || p_session, max_per_session, p_stream,
                                    p_follower, p_pending) THEN
        RETURN 'session-streams';
    END IF;
    IF max_per_holder > 0
       AND NOT mcp.slot_claim_among('holder:' || coalesce(p_holder, ''), max_per_holder,
                                    p_stream, p_follower, p_pending) THEN
        RETURN 'holder-streams';
    END IF;
    RETURN NULL;
END
$$;

-- May a session (p_session), a holder (p_holder) and a stream (p_stream, 0: none) take one
-- more stream or follower, whose id (p_new_stream or p_new_follower) the caller chose and
-- inserts in the same statement when admitted? Returns NULL, or which limit is reached:
-- 'session-streams', 'holder-streams' or 'stream-followers' (a limit of 0 is no limit).
-- Sessions and holders count in slots (mcp.slots_claim): admissions of one session or holder
-- never wait for each other's commit, and the limit is never overshot. A stream or follower
-- gives its slots back by ending (or by its lease running out): no write. Followers of one
-- stream (rare, and few) are serialised by an advisory lock held to the end of the
-- transaction; the count, in a VOLATILE function, sees what the previous holder committed.
CREATE OR REPLACE FUNCTION mcp.admit_stream(p_session text, p_holder text, p_stream bigint,
                                            max_per_session int, max_per_holder int,
                                            max_followers int, p_new_stream bigint,
                                            p_new_follower bigint)
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n bigint;
    refused text;
BEGIN
    -- Rows of followers whose process died, long expired (never waiting for a row lock):
    -- removed when a follower is admitted, not on every stream's admission (they count for
    -- nothing; ~2 % of PostgreSQL's CPU per call, bench/results.md, issue 12, third pass).
    IF p_stream > 0 THEN
        DELETE FROM mcp.followers WHERE id IN (
            SELECT id FROM mcp.followers WHERE lease_until < now() - interval '1 minute'
               FOR UPDATE SKIP LOCKED);
    END IF;
    -- slots_claim tests each limit itself; this test saves the call (a plpgsql call per
    -- admission) when neither is set.
    IF max_per_session > 0 OR max_per_holder > 0 THEN
        refused := mcp.slots_claim(p_session, p_holder, max_per_session, max_per_holder,
                                   p_new_stream, p_new_follower, '{}');
        IF refused IS NOT NULL THEN
            RETURN refused;
        END IF;
    END IF;
    IF max_followers > 0 AND p_stream > 0 THEN
        PERFORM pg_advisory_xact_lock(3, hashtext(p_stream::text));
        SELECT count(*) FROM mcp.followers
         WHERE stream_id = p_stream AND lease_until >= now()
          INTO n;
        IF n >= max_followers THEN
            RETURN 'stream-followers';
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- mcp.admit_stream for several request streams at once (the group commit's merged opening,
-- mcp_store_limits.c): for each i, a new stream id and NULL, or the limit that refused it, of
-- session p_sessions[i] and holder p_holders[i] under limits p_max_session[i] and
-- p_max_holder[i]; ord is p_ords[i]. The streams admitted before i hold their slots for it.
CREATE OR REPLACE FUNCTION mcp.admit_streams(p_ords bigint[], p_sessions text[],
                                             p_holders text[], p_max_session int[],
                                             p_max_holder int[])
RETURNS TABLE (ord bigint, id bigint, refused text) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    pending bigint[] := '{}';
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_ords, 1), 0) LOOP
        ord := p_ords[i];
        id := mcp.stream_id_new();
        refused := NULL;
        IF p_max_session[i] > 0 OR p_max_holder[i] > 0 THEN  -- as in mcp.admit_stream
            refused := mcp.slots_claim(p_sessions[i], p_holders[i], p_max_session[i],
                                       p_max_holder[i], id, NULL, pending);
        END IF;
        IF refused IS NULL THEN
            pending := pending || id;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- May one more session start, for p_holder? Returns NULL, 'sessions' (max_live live sessions
-- exist) or 'holder-sessions' (max_per_holder of them are p_holder's); 0 is no limit. Live:
-- not terminated, active within idle_secs (0: no idle limit). Serialised by advisory locks
-- held to the end of the transaction that inserts the session (sessions start far less often
-- than streams).
CREATE OR REPLACE FUNCTION mcp.admit_session(p_holder text, max_live int, max_per_holder int,
                                             idle_secs int)
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n bigint;
BEGIN
    IF max_live > 0 THEN
        PERFORM pg_advisory_xact_lock(4, 0);
        SELECT count(*) FROM mcp.sessions
         WHERE terminated_at IS NULL
           AND (idle_secs = 0 OR last_seen_at > now() - make_interval(secs => idle_secs))
          INTO n;
        IF n >= max_live THEN
            RETURN 'sessions';
        END IF;
    END IF;
    IF max_per_holder > 0 THEN
        PERFORM pg_advisory_xact_lock(5, hashtext(coalesce(p_holder, '')));
        SELECT count(*) FROM mcp.sessions
         WHERE holder = p_holder AND terminated_at IS NULL
           AND (idle_secs = 0 OR last_seen_at > now() - make_interval(secs => idle_secs))
          INTO n;
        IF n >= max_per_holder THEN
            RETURN 'holder-sessions';
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- Wake-ups for followers in other processes and on other hosts, on channel mcp_events with the
-- stream id. A notification is only a wake-up (delivered at commit); the tables are the truth.
-- Each transaction that notifies takes PostgreSQL's database-wide notify lock through its commit,
-- so only streams that someone follows are notified: a follower sets mcp.streams.followed (under
-- the stream row's FOR UPDATE lock) in the transaction that registers it, and reads the stream
-- only after that commit. Every statement that stores outbound messages on a stream reads the flag
-- under a FOR KEY SHARE lock of the same row (the lock its foreign key check takes anyway): a
-- writer that locked the row first commits before the follower's registration does (the follower
-- then reads its rows), a writer that comes later sees the flag and notifies. Status changes
-- notify through the row trigger below, under the UPDATE's own row lock, when the flag is set;
-- the statements that end streams on behalf of others (a session's DELETE, a lease taken over,
-- a stale standalone stream) notify every stream they end, for its owner. (No trigger on
-- mcp.events: schema version 5 dropped events_notify, sql/migrations/005.)
CREATE OR REPLACE FUNCTION mcp.notify_stream_status() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mcp_events', NEW.id::text);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER streams_notify
    AFTER UPDATE OF status ON mcp.streams
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.followed)
    EXECUTE FUNCTION mcp.notify_stream_status();
