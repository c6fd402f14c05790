/* mod_mcp_dbd — see mod_mcp_dbd.h. */
#include <apr_optional.h>
#include <apr_strings.h>
#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>
#include <httpd.h>
#include <http_log.h>
#include <http_protocol.h>
#include <apr_dbd.h>
#include <mod_dbd.h>

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_jsonrpc.h"
#include "mcp_listener.h"
#include "mod_mcp_config.h"
#include "mod_mcp_dbd.h"
#include "mod_mcp_status.h"

APLOG_USE_MODULE(mcp);

/* How often the gate pings a database that is away. */
#define PING_INTERVAL apr_time_from_msec(100)
/* At most this many statements in one group-commit transaction. */
#define GROUP_MAX 64

static APR_OPTIONAL_FN_TYPE(ap_dbd_open) *dbd_open_fn;
static APR_OPTIONAL_FN_TYPE(ap_dbd_close) *dbd_close_fn;

int mcp_dbd_init(server_rec *s)
{
    dbd_open_fn = APR_RETRIEVE_OPTIONAL_FN(ap_dbd_open);
    dbd_close_fn = APR_RETRIEVE_OPTIONAL_FN(ap_dbd_close);
    /* libpq's connect_timeout for every connection that does not set one (DBDParams may):
     * a database that accepts connections but never answers (stopped, wedged) must not hold
     * a connection attempt for ever. The children inherit the environment. */
    if (!getenv("PGCONNECT_TIMEOUT")) {
        apr_time_t secs = apr_time_sec(mcp_config_database_timeout(s) + APR_USEC_PER_SEC - 1);
        setenv("PGCONNECT_TIMEOUT", apr_psprintf(s->process->pool, "%d",
                                                 (int)(secs < 2 ? 2 : secs)), 0);
    }
    return dbd_open_fn && dbd_close_fn;
}

/* ---- the gate: one child's view of whether the database is there ------------------------- */

static struct {
    apr_thread_mutex_t *lock;
    apr_thread_mutex_t *lending;      /* held around ap_dbd_open (see borrow)               */
    apr_thread_cond_t  *changed;
    server_rec         *s;
    apr_pool_t         *pool;         /* pchild: the cloned connection parameters           */
    apr_time_t          down_since;   /* 0: up                                              */
    apr_time_t          next_ping;
    int                 probing;      /* a thread is pinging                                */
    int                 logged;       /* the outage was logged (a ping failed)              */
    const char *const  *keywords;     /* connection parameters, NULL until cloned           */
    const char *const  *values;
    /* Connections given back while a thread was inside ap_dbd_open (under gate.lock): the
     * returner thread hands them to mod_dbd at once, and that thread when it is done, whoever
     * comes first (see give_back). */
    ap_dbd_t           *returned[16];
    server_rec         *returned_s[16];
    int                 nreturned;
    apr_thread_cond_t  *queued;       /* signalled when one is queued (the returner waits)  */
    apr_thread_t       *returner;
    int                 stopping;     /* the child is ending: the returner ends too          */
    int                 exiting;      /* ... and nobody waits at the gate any more            */
    mcp_store_group_t  *group;        /* the child's group commit (mcp_store.h)             */
} gate;

/* Hands the connections queued so far to mod_dbd (outside gate.lock; it may wait for APR's pool
 * lock while another thread connects). */
static void hand_back_queued(void)
{
    ap_dbd_t *rec[16];
    server_rec *s[16];
    int i, n;

    apr_thread_mutex_lock(gate.lock);
    n = gate.nreturned;
    memcpy(rec, gate.returned, sizeof(rec[0]) * n);
    memcpy(s, gate.returned_s, sizeof(s[0]) * n);
    gate.nreturned = 0;
    apr_thread_mutex_unlock(gate.lock);
    for (i = 0; i < n; i++) {
        dbd_close_fn(s[i], rec[i]);
    }
}

/* Hands the connections given back meanwhile to mod_dbd; called holding gate.lending. */
static void lending_done(void)
{
    hand_back_queued();
    apr_thread_mutex_unlock(gate.lending);
}

/* The returner: the thread inside ap_dbd_open may be waiting there for a free connection (every
 * one of DBDMax is out), which only a connection handed back to mod_dbd ends. Those given back
 * meanwhile are queued (their threads must not wait behind a connect), so this thread hands
 * them back at once: otherwise that thread would wait for ever for connections that wait for
 * it. It may itself wait for APR's pool lock while a connect is under way; nobody waits for it. */
static void *APR_THREAD_FUNC returner_main(apr_thread_t *t, void *data)
{
    (void)t;
    (void)data;
    apr_thread_mutex_lock(gate.lock);
    while (!gate.stopping) {
        if (gate.nreturned == 0) {
            apr_thread_cond_wait(gate.queued, gate.lock);
            continue;
        }
        apr_thread_mutex_unlock(gate.lock);
        hand_back_queued();
        apr_thread_mutex_lock(gate.lock);
    }
    apr_thread_mutex_unlock(gate.lock);
    return NULL;
}

static apr_status_t returner_stop(void *data)
{
    apr_status_t rv;

    (void)data;
    apr_thread_mutex_lock(gate.lock);
    gate.stopping = 1;
    apr_thread_cond_signal(gate.queued);
    apr_thread_mutex_unlock(gate.lock);
    apr_thread_join(&rv, gate.returner);
    gate.returner = NULL;
    return APR_SUCCESS;
}

/* The child exits (a pre-cleanup: before the event loop's cleanup joins its workers, some of
 * which may be waiting at the gate to store, for up to half a lease): whoever waits at the
 * gate gives up now, and nobody waits there any more, so that an outage does not hold up the
 * exit until the MPM's parent kills the child. */
static apr_status_t gate_exiting(void *data)
{
    (void)data;
    apr_thread_mutex_lock(gate.lock);
    gate.exiting = 1;
    apr_thread_cond_broadcast(gate.changed);
    apr_thread_mutex_unlock(gate.lock);
    return APR_SUCCESS;
}

void mcp_dbd_child_init(apr_pool_t *pchild, server_rec *s)
{
    gate.s = s;
    gate.pool = pchild;
    if (apr_thread_mutex_create(&gate.lock, APR_THREAD_MUTEX_DEFAULT, pchild) != APR_SUCCESS
        || apr_thread_cond_create(&gate.changed, pchild) != APR_SUCCESS) {
        gate.lock = NULL;
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "cannot create the database gate; requests "
                     "retry the database on their own during an outage");
    }
    if (gate.lock) {
        apr_pool_pre_cleanup_register(pchild, NULL, gate_exiting);
    }
    if (apr_thread_mutex_create(&gate.lending, APR_THREAD_MUTEX_TIMED, pchild) != APR_SUCCESS) {
        gate.lending = NULL;
    }
    /* Without the returner, connections are not queued: they go back to mod_dbd at once. */
    if (gate.lock && gate.lending
        && (apr_thread_cond_create(&gate.queued, pchild) != APR_SUCCESS
            || apr_thread_create(&gate.returner, NULL, returner_main, NULL, pchild)
               != APR_SUCCESS)) {
        gate.returner = NULL;
    }
    if (gate.returner) {
        apr_pool_cleanup_register(pchild, NULL, returner_stop, apr_pool_cleanup_null);
    }
    if (mcp_config_group_commit(s) > 0
        && mcp_store_group_create(&gate.group, pchild, GROUP_MAX, mcp_config_group_commit(s))
           != APR_SUCCESS) {
        gate.group = NULL;
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "cannot set up the group commit "
                     "(MCPDatabaseGroupCommit): every statement commits on its own");
    }
}

static void gate_probe(void);

/* Whether the database is away; when a ping is due, this thread pings (one at a time, a
 * couple of seconds at most), so that callers that never wait (the sweeps, lease renewal)
 * also see it come back. */
static int gate_is_down(void)
{
    int down;

    if (!gate.lock) {
        return 0;
    }
    apr_thread_mutex_lock(gate.lock);
    if (gate.down_since && !gate.probing && apr_time_now() >= gate.next_ping) {
        gate_probe();
    }
    down = gate.down_since != 0;
    apr_thread_mutex_unlock(gate.lock);
    return down;
}

/* A connection could not be had: the database is away until a ping says otherwise. */
static void gate_mark_down(void)
{
    if (!gate.lock) {
        return;
    }
    apr_thread_mutex_lock(gate.lock);
    if (!gate.down_since) {
        gate.down_since = apr_time_now();
        gate.next_ping = gate.down_since + PING_INTERVAL;
    }
    apr_thread_mutex_unlock(gate.lock);
}

/* Whether the parameters ask for a kind of server (libpq's target_session_attrs other than
 * "any": read-write for a failover-aware DBDParams), which a ping cannot tell: a standby that
 * is not promoted yet answers pings, but mod_dbd's connection to it is refused. */
static int asks_for_a_kind_of_server(const char *const *k, const char *const *v)
{
    int i;

    for (i = 0; k[i]; i++) {
        if (strcmp(k[i], "target_session_attrs") == 0 && strcmp(v[i], "any") != 0) {
            return 1;
        }
    }
    return 0;
}

/* One ping with the cloned parameters and a short connect timeout; non-zero: it answered. When
 * the parameters ask for a kind of server, the ping is a connection to one instead (else every
 * ping while a failover's standby waits for its promotion would open the gate for mod_dbd to
 * fail and log again, ten times a second per child). */
static int ping(void)
{
    const char **k, **v;
    int n, i;

    if (!gate.keywords) {
        /* Nothing to ping with (no connection was ever made): the next borrow tries mod_dbd. */
        apr_sleep(PING_INTERVAL);
        return 1;
    }
    for (n = 0; gate.keywords[n]; n++) {
    }
    k = malloc(sizeof(*k) * (n + 2));
    v = malloc(sizeof(*v) * (n + 2));
    if (!k || !v) {
        free(k);
        free(v);
        return 1;
    }
    for (i = 0; i < n; i++) {
        k[i] = gate.keywords[i];
        v[i] = gate.values[i];
    }
    k[n] = "connect_timeout";   /* the later value wins */
    v[n] = "1";
    k[n + 1] = v[n + 1] = NULL;
    if (asks_for_a_kind_of_server(k, v)) {
        PGconn *conn = PQconnectdbParams(k, v, 0);

        i = conn && PQstatus(conn) == CONNECTION_OK;
        PQfinish(conn);
    }
    else {
        i = PQpingParams(k, v, 0) == PQPING_OK;
    }
    free(k);
    free(v);
    return i;
}

/* Called with the lock held: one thread pings, the others wait for its verdict. */
static void gate_probe(void)
{
    apr_time_t now = apr_time_now();
    int up;

    gate.probing = 1;
    apr_thread_mutex_unlock(gate.lock);
    up = ping();
    apr_thread_mutex_lock(gate.lock);
    gate.probing = 0;
    gate.next_ping = apr_time_now() + PING_INTERVAL;
    if (up) {
        if (gate.logged) {
            ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, gate.s, "the database answers again after "
                         "%.1f s; requests go on", (double)(now - gate.down_since) / 1e6);
        }
        gate.down_since = 0;
        gate.logged = 0;
        apr_thread_cond_broadcast(gate.changed);
    }
}

/* The lender's wait: the database failed; wait (with every other thread of this child) until
 * a ping says it is back, or until the deadline. */
static int gate_wait(mcp_store_t *db, apr_time_t deadline, const char *err)
{
    apr_time_t now = apr_time_now();
    int up;

    (void)db;
    if (!gate.lock) {
        apr_sleep(deadline - now < PING_INTERVAL ? (deadline > now ? deadline - now : 0)
                                                 : PING_INTERVAL);
        return 0;
    }
    apr_thread_mutex_lock(gate.lock);
    if (!gate.down_since) {
        gate.down_since = now;
        gate.next_ping = now;
    }
    while (gate.down_since && !gate.exiting && (now = apr_time_now()) < deadline) {
        if (!gate.probing && now >= gate.next_ping) {
            gate_probe();
            if (gate.down_since && !gate.logged) {
                /* A failed ping: a real outage, not one broken connection. */
                gate.logged = 1;
                ap_log_error(APLOG_MARK, APLOG_WARNING, 0, gate.s, "the database is unreachable "
                             "(%.*s); requests wait for it up to MCPDatabaseTimeout (%"
                             APR_TIME_T_FMT " ms)", (int)strcspn(err, "\n"), err,
                             apr_time_as_msec(mcp_config_database_timeout(gate.s)));
            }
            continue;
        }
        apr_thread_cond_timedwait(gate.changed, gate.lock,
                                  deadline - now < PING_INTERVAL ? deadline - now : PING_INTERVAL);
    }
    up = gate.down_since == 0;
    apr_thread_mutex_unlock(gate.lock);
    return up ? 0 : 1;
}

/* ---- borrowing from mod_dbd ---------------------------------------------------------------- */

typedef struct lender_t {
    server_rec *s;
    apr_pool_t *pool;
    ap_dbd_t   *dbd;    /* while borrowed */
    apr_time_t  since;  /* ... since then */
} lender_t;

/* A pooled connection whose server went away (a PostgreSQL restart) still looks fine to libpq
 * until it is used, so its first statement would fail. Such a connection has the server's
 * goodbye (or EOF) waiting on its socket: read it without blocking and, if the connection turns
 * out broken, reconnect before anyone uses it. No round trip for a healthy one. */
static void revive_if_broken(PGconn *conn)
{
    struct pollfd pfd;
    int i;

    pfd.fd = PQsocket(conn);
    pfd.events = POLLIN;
    /* The goodbye message first, then the end of the stream: a few reads at most. */
    for (i = 0; i < 4 && pfd.fd >= 0 && PQstatus(conn) == CONNECTION_OK; i++) {
        pfd.revents = 0;
        if (poll(&pfd, 1, 0) <= 0 || !PQconsumeInput(conn)) {
            break;
        }
    }
    if (PQstatus(conn) == CONNECTION_BAD) {
        PQreset(conn);
    }
}

/* Clones the connection parameters from a pooled connection, once per child. */
static void remember_params(PGconn *conn)
{
    const char *const *k, *const *v;
    apr_pool_t *p;

    if (gate.keywords || !gate.lock) {
        return;
    }
    apr_thread_mutex_lock(gate.lock);
    if (!gate.keywords && apr_pool_create(&p, gate.pool) == APR_SUCCESS) {
        if (mcp_listener_params_from_conn(p, conn, &k, &v) == 0) {
            gate.values = v;
            gate.keywords = k;
        }
    }
    apr_thread_mutex_unlock(gate.lock);
}

/* ---- the schema's version: checked on a child's first connection ------------------------- */

/* httpd may start before the database can be reached, so the check is not made at start-up but
 * on the first connection a child borrows; once it matched, never again. While it does not
 * match, every statement fails at once (the client gets 503 naming both versions) and the
 * version is read again at most once a second, so an upgrade is noticed without a restart. */
static struct {
    volatile int ok;       /* the version matched                                  */
    int          found;    /* the version last read, -1: none yet                  */
    apr_time_t   next;     /* when to read it again                                */
    int          logged;   /* the version last logged                              */
} schema = { 0, -1, 0, -1 };

static const char *schema_problem(apr_pool_t *p, int v)
{
    if (v == 0) {
        return "the database holds no mod_mcp schema: load sql/schema.sql into it";
    }
    if (v < MCP_STORE_SCHEMA_VERSION) {
        return apr_psprintf(p, "the database schema is version %d, this mod_mcp needs version "
                            "%d: upgrade it with sql/upgrade.sql", v, MCP_STORE_SCHEMA_VERSION);
    }
    return apr_psprintf(p, "the database schema is version %d, newer than version %d that this "
                        "mod_mcp understands: run the mod_mcp release that upgraded it", v,
                        MCP_STORE_SCHEMA_VERSION);
}

/* Non-zero when conn's database has the schema this build needs; otherwise db->fatal (a schema
 * it does not understand) or *err (the version could not be read: a connection fault). */
static int schema_matches(mcp_store_t *db, PGconn *conn, const char **err)
{
    lender_t *l = db->baton;
    apr_time_t now = apr_time_now();
    int v, broken = 0, cached = 0;

    if (schema.ok) {
        return 1;
    }
    if (gate.lock) {
        apr_thread_mutex_lock(gate.lock);
    }
    if (schema.found >= 0 && now < schema.next) {
        v = schema.found;
        cached = 1;
    }
    if (gate.lock) {
        apr_thread_mutex_unlock(gate.lock);
    }
    if (!cached) {
        if ((v = mcp_store_schema_version(db, l->pool, conn, err, &broken)) < 0) {
            return 0;
        }
        if (gate.lock) {
            apr_thread_mutex_lock(gate.lock);
        }
        schema.found = v;
        schema.next = now + apr_time_from_sec(1);
        schema.ok = v == MCP_STORE_SCHEMA_VERSION;
        if (!schema.ok && schema.logged != v) {
            schema.logged = v;
            ap_log_error(APLOG_MARK, APLOG_ERR, 0, l->s, "refusing to use the database: %s; "
                         "every MCP request is answered 503 until it is", schema_problem(l->pool, v));
        }
        else if (schema.ok && schema.logged >= 0) {
            ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, l->s, "the database schema is version %d "
                         "now; requests go on", v);
        }
        if (gate.lock) {
            apr_thread_mutex_unlock(gate.lock);
        }
        if (schema.ok) {
            return 1;
        }
    }
    db->fatal = schema_problem(l->pool, v);
    return 0;
}

static PGconn *borrow(mcp_store_t *db, const char **err)
{
    lender_t *l = db->baton;
    PGconn *conn;

    if (!dbd_open_fn) {
        *err = "mod_dbd is not loaded: mod_mcp keeps its sessions in a database "
               "(LoadModule dbd_module, DBDriver pgsql, DBDParams ...)";
        return NULL;
    }
    if (gate_is_down()) {
        *err = "the database is unreachable";
        return NULL;
    }
    /* ap_dbd_open may connect (a new or a broken pooled connection), for up to DBDParams'
     * connect_timeout, and APR's pool holds its lock while it connects: every other thread's
     * ap_dbd_open and ap_dbd_close waits behind it. One thread at a time goes in, the others
     * wait here no longer than their statement's deadline. */
    if (gate.lending) {
        apr_time_t left = db->until ? db->until - apr_time_now() : 0;
        apr_status_t rv = !db->until ? apr_thread_mutex_lock(gate.lending)
                          : left > 0 ? apr_thread_mutex_timedlock(gate.lending, left)
                          : apr_thread_mutex_trylock(gate.lending);

        if (rv != APR_SUCCESS) {
            *err = "no database connection in time (another thread is still connecting to the "
                   "database)";
            return NULL;
        }
        if (gate_is_down()) {
            apr_thread_mutex_unlock(gate.lending);
            *err = "the database is unreachable";
            return NULL;
        }
    }
    l->dbd = dbd_open_fn(l->pool, l->s);
    if (gate.lending) {
        lending_done();
    }
    if (!l->dbd) {
        gate_mark_down();
        *err = "no database connection available from mod_dbd (check DBDParams and that "
               "PostgreSQL is up)";
        return NULL;
    }
    if (strcmp(apr_dbd_name(l->dbd->driver), "pgsql") != 0
        || !(conn = apr_dbd_native_handle(l->dbd->driver, l->dbd->handle))) {
        dbd_close_fn(l->s, l->dbd);
        l->dbd = NULL;
        *err = "DBDriver is not pgsql: mod_mcp needs PostgreSQL";
        return NULL;
    }
    revive_if_broken(conn);
    remember_params(conn);
    if (!schema_matches(db, conn, err)) {
        dbd_close_fn(l->s, l->dbd);
        l->dbd = NULL;
        return NULL;
    }
    l->since = apr_time_now();
    mcp_status_db_in_use(1);
    return conn;
}

static void give_back(mcp_store_t *db, PGconn *conn, int broken)
{
    lender_t *l = db->baton;

    /* A broken connection goes back as it is: mod_dbd resets it (PQreset) when it is next
     * taken, which the gate delays until the database answers pings again. */
    (void)conn;
    (void)broken;
    if (l->dbd) {
        /* ap_dbd_close waits for APR's pool lock, which a thread connecting in ap_dbd_open
         * holds (up to DBDParams' connect_timeout): when a thread is in there, this one is
         * queued for the returner (or that thread, when it is done) to hand back, and the
         * caller's answer does not wait. */
        if (gate.lending && gate.lock
            && apr_thread_mutex_trylock(gate.lending) != APR_SUCCESS) {
            int queued = 0;

            apr_thread_mutex_lock(gate.lock);
            if (gate.returner && !gate.stopping
                && gate.nreturned < (int)(sizeof(gate.returned) / sizeof(gate.returned[0]))) {
                gate.returned_s[gate.nreturned] = l->s;
                gate.returned[gate.nreturned++] = l->dbd;
                apr_thread_cond_signal(gate.queued);
                queued = 1;
            }
            apr_thread_mutex_unlock(gate.lock);
            if (!queued) {
                dbd_close_fn(l->s, l->dbd);
            }
            else if (apr_thread_mutex_trylock(gate.lending) == APR_SUCCESS) {
                lending_done();   /* that thread was done before this one was queued */
            }
        }
        else if (gate.lending && gate.lock) {
            dbd_close_fn(l->s, l->dbd);
            lending_done();
        }
        else {
            dbd_close_fn(l->s, l->dbd);
        }
        l->dbd = NULL;
        mcp_status_db_in_use(-1);
        mcp_status_observe(MCP_HIST_STORE, l->since);
    }
}

static const mcp_store_lender_t dbd_lender = { borrow, give_back, gate_wait };

int mcp_db_away(void)
{
    return gate_is_down();
}

mcp_store_t *mcp_db_server(apr_pool_t *p, server_rec *s, apr_interval_time_t patience)
{
    mcp_store_t *db = apr_palloc(p, sizeof(*db));
    lender_t *l = apr_pcalloc(p, sizeof(*l));

    l->s = s;
    l->pool = p;
    mcp_store_init(db, &dbd_lender, l, patience, mcp_config_database_timeout(s));
    db->group = gate.group;
    return db;
}

mcp_store_t *mcp_db_request(request_rec *r, apr_interval_time_t patience)
{
    return mcp_db_server(r->pool, r->server, patience);
}

int mcp_db_conn_params(apr_pool_t *p, server_rec *s, const char *const **keywords,
                       const char *const **values)
{
    if (!gate.keywords) {
        /* One statement's worth of borrowing clones them. */
        mcp_store_t *db = mcp_db_server(p, s, 0);
        const char *err;
        PGconn *conn = borrow(db, &err);

        if (conn) {
            give_back(db, conn, 0);
        }
    }
    if (!gate.keywords) {
        return -1;
    }
    *keywords = gate.keywords;
    *values = gate.values;
    return 0;
}

/* ---- what the client is told ---------------------------------------------------------------- */

void mcp_db_answer(request_rec *r, const mcp_store_t *db, mcp_store_status_t st, int *http,
                   int *code, const char **message)
{
    const char *sqlstate = db->sqlstate;

    if (st == MCP_STORE_UNAVAILABLE) {
        *http = HTTP_SERVICE_UNAVAILABLE;
        *code = MCP_JSONRPC_UNAVAILABLE;
        *message = db->fatal ? apr_pstrcat(r->pool, "Service Unavailable: the session store "
                                           "cannot be used: ", db->fatal, NULL)
                             : "Service Unavailable: the session store is unavailable; try "
                               "again shortly";
        ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r, "%s", db->error);
        return;
    }
    if (sqlstate && strncmp(sqlstate, "22", 2) == 0) {
        *http = HTTP_BAD_REQUEST;
        *code = MCP_JSONRPC_INVALID_REQUEST;
        *message = apr_psprintf(r->pool, "Bad Request: the message holds data the session store "
                                "cannot keep (SQLSTATE %s)", sqlstate);
    }
    else {
        *http = HTTP_INTERNAL_SERVER_ERROR;
        *code = MCP_JSONRPC_INTERNAL_ERROR;
        *message = apr_psprintf(r->pool, "Internal Server Error: the session store refused the "
                                "statement (SQLSTATE %s)", sqlstate ? sqlstate : "none");
    }
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "%s", db->error);
}
