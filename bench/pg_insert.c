/* bench/pg_insert.c — the PostgreSQL ceiling for the gateway's event INSERT.
 *
 *   pg_insert CONNINFO SESSION_ID FIRST_STREAM_ID THREADS SECONDS [exec|prepared]
 *
 * THREADS threads, each with its own connection, insert one event per statement into
 * mcp.events for SECONDS seconds, with the very statement mod_mcp uses to store a stream's
 * messages (mcp_store_events_append in mod_mcp/mcp_store.c), bound parameters, autocommit: a
 * one-element JSON array, so one row per statement. Thread i writes to stream FIRST_STREAM_ID + i
 * (which must exist and belong to SESSION_ID) with seq 2, 3, ...
 *
 *   exec      PQexecParams: an unnamed statement parsed and planned every time (what mod_dbd's
 *             apr_dbd_pgsql driver does for the module's unlabelled statements)
 *   prepared  PQprepare once per connection, then PQexecPrepared
 *
 * Prints one line: BENCH {"inserts":N,"seconds":S,"rate":R,"p50_us":..,"p99_us":..,"errors":E}
 *
 * Only the inserts are timed: every thread connects (and prepares) first. So that a caller can
 * measure the database's CPU over the inserts alone, without its backends' start-up and exit,
 * the program prints "CONNECTED" once every thread is connected and waits for a line on stdin
 * before it starts, and after the BENCH line waits for another before it disconnects. A
 * terminal or an end of input on stdin does not wait.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define MAX_THREADS 256
#define MAX_SAMPLES (1 << 20)

static const char SQL[] =
    "INSERT INTO mcp.events (session_id, stream_id, seq, direction, kind, message_text,"
    "                        message, principal)"
    " SELECT $1, nullif($2::bigint, 0),"
    "        CASE WHEN $3::bigint = 0 THEN NULL ELSE $4::bigint + t.ord - 1 END,"
    "        $5, 'message', t.value::text, mcp.audit_jsonb(t.value::text), $6"
    "   FROM json_array_elements($7::json) WITH ORDINALITY AS t(value, ord)"
    "  ORDER BY t.ord";

/* A typical relayed message: a tools/call result of the echo tool. */
static const char MESSAGE[] =
    "[{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hello\"}]}}]";

/* Every worker and main: once connected, once started, once done, once released. */
static pthread_barrier_t step;

typedef struct worker_t {
    pthread_t   thread;
    const char *conninfo;
    const char *session_id;
    int64_t     stream_id;
    int         prepared;
    double      deadline;
    long        inserts;
    long        errors;
    uint32_t   *lat_us;     /* per-insert latency samples */
    long        n_lat;
    char        err[256];
} worker_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits for a line on stdin, unless it is a terminal; an end of input does not wait. */
static void await_line(void)
{
    int ch;

    if (isatty(0)) {
        return;
    }
    while ((ch = getchar()) != EOF && ch != '\n') {
    }
}

static void *run(void *arg)
{
    worker_t *w = arg;
    PGconn *c = PQconnectdb(w->conninfo);
    char stream[32], seq[32];
    const char *params[7];
    int64_t next_seq = 2;
    int ready = 1;

    if (PQstatus(c) != CONNECTION_OK) {
        snprintf(w->err, sizeof(w->err), "connect: %s", PQerrorMessage(c));
        w->errors++;
        ready = 0;
    }
    else if (w->prepared) {
        PGresult *r = PQprepare(c, "append", SQL, 7, NULL);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            snprintf(w->err, sizeof(w->err), "prepare: %s", PQerrorMessage(c));
            w->errors++;
            ready = 0;
        }
        PQclear(r);
    }
    pthread_barrier_wait(&step);   /* connected */
    pthread_barrier_wait(&step);   /* started: w->deadline is set */
    snprintf(stream, sizeof(stream), "%" PRId64, w->stream_id);
    params[0] = w->session_id;
    params[1] = stream;
    params[2] = stream;
    params[3] = seq;
    params[4] = "out";
    params[5] = NULL;        /* principal: none, as for an unauthenticated session */
    params[6] = MESSAGE;
    while (ready) {
        double t0 = now_s(), t1;
        PGresult *r;

        if (t0 >= w->deadline) {
            break;
        }
        snprintf(seq, sizeof(seq), "%" PRId64, next_seq++);
        r = w->prepared ? PQexecPrepared(c, "append", 7, params, NULL, NULL, 0)
                        : PQexecParams(c, SQL, 7, NULL, params, NULL, NULL, 0);
        t1 = now_s();
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            if (!w->err[0]) {
                snprintf(w->err, sizeof(w->err), "insert: %s", PQerrorMessage(c));
            }
            w->errors++;
        }
        else {
            w->inserts++;
            if (w->n_lat < MAX_SAMPLES) {
                w->lat_us[w->n_lat++] = (uint32_t)((t1 - t0) * 1e6);
            }
        }
        PQclear(r);
    }
    pthread_barrier_wait(&step);   /* done */
    pthread_barrier_wait(&step);   /* released */
    PQfinish(c);
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    static worker_t w[MAX_THREADS];
    int n, i, prepared = 0;
    double seconds, t0, elapsed;
    long inserts = 0, errors = 0, n_lat = 0;
    uint32_t *all;
    const char *err = "";

    if (argc < 6) {
        fprintf(stderr, "usage: %s CONNINFO SESSION_ID FIRST_STREAM_ID THREADS SECONDS "
                        "[exec|prepared]\n", argv[0]);
        return 2;
    }
    n = atoi(argv[4]);
    seconds = atof(argv[5]);
    if (argc > 6) {
        if (strcmp(argv[6], "prepared") == 0) {
            prepared = 1;
        }
        else if (strcmp(argv[6], "exec") != 0) {
            fprintf(stderr, "mode must be exec or prepared\n");
            return 2;
        }
    }
    if (n < 1 || n > MAX_THREADS || seconds <= 0) {
        fprintf(stderr, "THREADS must be 1..%d and SECONDS > 0\n", MAX_THREADS);
        return 2;
    }
    pthread_barrier_init(&step, NULL, (unsigned)n + 1);
    for (i = 0; i < n; i++) {
        w[i].conninfo = argv[1];
        w[i].session_id = argv[2];
        w[i].stream_id = strtoll(argv[3], NULL, 10) + i;
        w[i].prepared = prepared;
        w[i].lat_us = malloc(sizeof(uint32_t) * MAX_SAMPLES);
        if (!w[i].lat_us || pthread_create(&w[i].thread, NULL, run, &w[i]) != 0) {
            fprintf(stderr, "cannot start thread %d\n", i);
            return 1;
        }
    }
    pthread_barrier_wait(&step);   /* connected */
    printf("CONNECTED\n");
    fflush(stdout);
    await_line();
    t0 = now_s();
    for (i = 0; i < n; i++) {
        w[i].deadline = t0 + seconds;
    }
    pthread_barrier_wait(&step);   /* started */
    pthread_barrier_wait(&step);   /* done */
    elapsed = now_s() - t0;
    for (i = 0; i < n; i++) {
        inserts += w[i].inserts;
        errors += w[i].errors;
        n_lat += w[i].n_lat;
        if (!*err && w[i].err[0]) {
            err = w[i].err;
        }
    }
    all = malloc(sizeof(uint32_t) * (n_lat ? n_lat : 1));
    for (i = 0, n_lat = 0; i < n; i++) {
        memcpy(all + n_lat, w[i].lat_us, sizeof(uint32_t) * w[i].n_lat);
        n_lat += w[i].n_lat;
    }
    qsort(all, (size_t)n_lat, sizeof(uint32_t), cmp_u32);
    printf("BENCH {\"inserts\":%ld,\"seconds\":%.3f,\"rate\":%.1f,\"p50_us\":%u,\"p99_us\":%u,"
           "\"errors\":%ld,\"error\":\"", inserts, elapsed, inserts / elapsed,
           n_lat ? all[n_lat / 2] : 0, n_lat ? all[(long)(n_lat * 0.99)] : 0, errors);
    for (; *err; err++) {
        putchar(*err == '"' || *err == '\\' || (unsigned char)*err < 0x20 ? ' ' : *err);
    }
    printf("\"}\n");
    fflush(stdout);
    await_line();
    pthread_barrier_wait(&step);   /* released */
    for (i = 0; i < n; i++) {
        pthread_join(w[i].thread, NULL);
    }
    return errors && !inserts ? 1 : 0;
}
