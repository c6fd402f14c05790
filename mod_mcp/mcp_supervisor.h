/* mcp_supervisor.h — what the files of the mcp-stdio-supervisor program share (docs/stdio.md is
 * its contract): the event loop's watches and timers, the log, the configuration, the sessions
 * with their processes, and the HTTP connections.
 *
 * The program is single-threaded: one epoll set, one timer heap, level-triggered watches that
 * read at most one chunk per wake-up (so that a process flooding its stderr cannot starve the
 * others). Nothing blocks but the fork of a new process and the writes of log lines.
 *
 *   mcp_supervisor.c          main: control pipe, signals, log, loop, timers, shutdown
 *   mcp_supervisor_config.c   the configuration line (JSON) read into sv_config_t
 *   mcp_supervisor_http.c     the listener, the connections, the HTTP API's requests
 *   mcp_supervisor_session.c  sessions: initialize, requests, routing, dying
 *   mcp_supervisor_proc.c     their processes: I/O, ending, reaping
 *
 * Private to the program: no library links it. Internal names take the sv_ prefix.
 */
#ifndef MCP_SUPERVISOR_H
#define MCP_SUPERVISOR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "mcp_heap.h"
#include "mcp_lines.h"
#include "mcp_proc.h"
#include "mcp_reqhead.h"
#include "mcp_route.h"

/* ---- limits (docs/stdio.md) ---------------------------------------------------------------- */
#define SV_MAX_HEAD        16384                 /* bytes of one request head            */
#define SV_MAX_FIELDS      100                   /* header fields of one request         */
#define SV_MAX_BODY        (64LL * 1024 * 1024)  /* 413 above                            */
#define SV_WRITE_QUEUE_MAX (16u * 1024 * 1024)   /* bytes waiting for a process's stdin  */
#define SV_QUEUE_MESSAGES  1000                  /* messages waiting for a stream        */
#define SV_QUEUE_BYTES     (4u * 1024 * 1024)
#define SV_KEEPALIVE_MS    15000                 /* a comment on every open stream       */
#define SV_TOMBSTONE_MS    600000                /* an ended session's id is known 10 min */
#define SV_STDERR_BURST    20                    /* stderr lines logged at once ...      */
#define SV_STDERR_RATE     5                     /* ... then per second                  */
#define SV_STDERR_LINE     2048                  /* a longer stderr line is cut          */
#define SV_CONN_OUT_MAX    (256u * 1024 * 1024)  /* a peer that reads nothing is dropped */
#define SV_PAUSE_BYTES     (8u * 1024 * 1024)    /* a stream this far behind pauses the
                                                    reading of its process's stdout ...  */
#define SV_RESUME_BYTES    (1u * 1024 * 1024)    /* ... until it is back under this      */
#define SV_EOF_WAIT_MS     200                   /* stdout closed: how long to wait for
                                                    the exit status before saying so     */
#define SV_CHUNK           65536                 /* one read per wake-up                 */
#define SV_CONTROL_LINE    (16u * 1024 * 1024)   /* one configuration line               */
#define SV_ADVERTISE_MAX   160
#define SV_NAME_MAX        64                    /* a server's name (the glue's bound too) */
#define SV_SESSION_ID_MAX  256                   /* what the gateway accepts              */
#define SV_JSON_DEPTH      128

/* ---- log (httpd's error log format, on stderr) ------------------------------------------- */
enum { SV_EMERG, SV_ALERT, SV_CRIT, SV_ERR, SV_WARN, SV_NOTICE, SV_INFO, SV_DEBUG };
void sv_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The level a log_level name means (trace1..8 are debug); -1 when unknown. */
int sv_log_level_parse(const char *name);

/* ---- a byte buffer ------------------------------------------------------------------------ */
typedef struct sv_buf_t {
    char  *data;
    size_t off;            /* bytes before off are consumed */
    size_t len;            /* bytes in data, consumed ones included */
    size_t cap;
} sv_buf_t;
void sv_buf_add(sv_buf_t *b, const void *p, size_t n);   /* aborts when out of memory */
void sv_buf_printf(sv_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
size_t sv_buf_pending(const sv_buf_t *b);
void sv_buf_consume(sv_buf_t *b, size_t n);
void sv_buf_free(sv_buf_t *b);
void *sv_xmalloc(size_t n);
void *sv_xcalloc(size_t n, size_t size);
char *sv_xstrdup(const char *s);
char *sv_xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- a hash of nodes by string key (intrusive, chained, grows by doubling) --------------- */
typedef struct sv_hnode_t {
    struct sv_hnode_t *next;
    uint64_t           hash;
    const char        *key;   /* the container's */
} sv_hnode_t;
typedef struct sv_hash_t {
    sv_hnode_t **buckets;
    size_t       nbuckets;
    size_t       count;
} sv_hash_t;
sv_hnode_t *sv_hash_get(const sv_hash_t *h, const char *key);
void sv_hash_put(sv_hash_t *h, sv_hnode_t *node, const char *key);
void sv_hash_del(sv_hash_t *h, sv_hnode_t *node);
void sv_hash_free(sv_hash_t *h);

/* ---- the loop: timers and watches -------------------------------------------------------- */
typedef struct sv_timer_t sv_timer_t;
typedef void sv_timer_fn(sv_timer_t *t);
struct sv_timer_t {
    mcp_heap_node_t node;   /* its due: CLOCK_MONOTONIC ms */
    sv_timer_fn    *fn;
    void           *data;
};
uint64_t sv_now(void);
void sv_timer_set(sv_timer_t *t, uint64_t delay_ms, sv_timer_fn *fn, void *data);
void sv_timer_cancel(sv_timer_t *t);

typedef struct sv_watch_t sv_watch_t;
typedef void sv_watch_fn(sv_watch_t *w, uint32_t events);
struct sv_watch_t {
    int          fd;       /* -1: not watched */
    uint32_t     events;
    sv_watch_fn *fn;
    void        *data;
};
void sv_watch_add(sv_watch_t *w, int fd, uint32_t events, sv_watch_fn *fn, void *data);
void sv_watch_mod(sv_watch_t *w, uint32_t events);
void sv_watch_del(sv_watch_t *w);     /* out of the epoll set; the fd stays open */

/* Runs fn(p) after the events of this loop turn are handled: what holds a watch is freed so,
 * since a later event of the same epoll_wait may still point at it. */
void sv_defer(void (*fn)(void *), void *p);

/* ---- the configuration --------------------------------------------------------------------- */
typedef struct sv_server_t {
    int              refs;
    char            *name;
    char           **argv;
    char           **envp;
    char            *directory;
    mcp_proc_spec_t  spec;
    mcp_proc_limit_t limits[4];
    uint64_t         start_timeout_ms;
    uint64_t         idle_timeout_ms;   /* 0: never */
    uint64_t         stop_grace_ms;
    size_t           max_line;
    long             max_sessions;
    long             max_per_principal;
} sv_server_t;

typedef struct sv_config_t {
    char         *listen;
    char         *advertise;           /* as given, "{port}" not replaced */
    char         *secret;
    int           log_level;
    long          max_sessions;
    sv_server_t **servers;
    size_t        nservers;
} sv_config_t;

/* Reads a configuration line; NULL with a one-line sentence in err. */
sv_config_t *sv_config_parse(const char *text, size_t len, char *err, size_t errlen);
void sv_config_free(sv_config_t *c);           /* servers are released, not freed */
sv_server_t *sv_config_server(const sv_config_t *c, const char *name);
sv_server_t *sv_server_hold(sv_server_t *s);
void sv_server_release(sv_server_t *s);

/* ---- sessions and processes (mcp_supervisor_session.c) ---------------------------------- */
typedef struct sv_conn_t sv_conn_t;
typedef struct sv_session_t sv_session_t;
typedef struct sv_proc_t sv_proc_t;

enum { SV_STARTING, SV_RUNNING, SV_DEAD };

struct sv_session_t {
    sv_hnode_t    node;              /* sv.sessions, by hex */
    char          hex[33];
    char         *id;                /* the Mcp-Session-Id: hex@advertise/stdio/name */
    char          tag[9];            /* in log lines */
    int           state;
    sv_server_t  *server;
    char         *principal;         /* NULL: anonymous */
    mcp_route_t  *route;
    sv_proc_t    *proc;              /* NULL once dead */
    sv_conn_t    *conns;             /* the connections of its open exchanges */
    sv_timer_t    start_timer;
    sv_timer_t    idle_timer;
    uint64_t      last_activity;
    char         *ended;             /* SV_DEAD: why, "exited with status 3" */
    uint64_t      dead_at;
    sv_session_t *tomb_next;         /* sv's list of dead sessions, oldest first */
    sv_session_t *live_prev, *live_next;  /* sv's list of live sessions */
};

/* A line of the process's stdout (mcp_supervisor_proc.c); non-zero when the session is dead. */
int sv_session_line(sv_session_t *s, const char *line, size_t len);
/* Its process died or was ended: why, e.g. "exited with status 3". */
void sv_session_died(sv_session_t *s, const char *what);

/* Starts a session for an initialize POST on conn (its body parsed as msg). Answers conn itself
 * when it cannot (429, 502). */
void sv_session_initialize(sv_conn_t *conn, sv_server_t *server, json_object *msg);
/* A POST of an existing session: writes the body to the process, opens the exchange. */
void sv_session_post(sv_conn_t *conn, sv_session_t *s, json_object *msg);
void sv_session_get(sv_conn_t *conn, sv_session_t *s);
void sv_session_delete(sv_conn_t *conn, sv_session_t *s);
/* The session's exchange on conn is over (its client went away, or it ended). */
void sv_session_detach(sv_conn_t *conn);
/* conn has written out most of what it had: its session's process may be read again. */
void sv_session_drained(sv_conn_t *c);
/* Ends every session (the supervisor stops). */
void sv_session_end_all(void);
/* Frees the dead sessions whose time is up; all of them when all is set. */
void sv_session_sweep(int all);
sv_session_t *sv_session_find(const char *hex);

/* ---- processes (mcp_supervisor_proc.c) ------------------------------------------------- */
struct sv_proc_t {
    sv_hnode_t    node;              /* sv.procs, by pid */
    char          pidkey[16];
    mcp_proc_t    p;
    sv_session_t *session;           /* NULL once the session died */
    char          label[160];        /* "<server>/<tag>" in log lines */
    sv_watch_t    out_w, err_w, in_w;
    mcp_lines_t  *out_lines, *err_lines;
    sv_buf_t      inq;               /* bytes waiting for its stdin */
    int           reaped, status, freed;
    int           paused;            /* its stdout is not read: a stream is behind */
    uint64_t      grace_ms;
    size_t        max_line;
    sv_timer_t    end_timer, eof_timer;
    double        tokens;            /* log lines it may still have logged (stderr, noise) */
    uint64_t      refill_at;
    long          suppressed;
    char          last_stderr[256];
    sv_proc_t    *prev, *next;
};

/* Starts the process of session s (its server's command); NULL with a sentence in err. */
sv_proc_t *sv_proc_start(sv_session_t *s, char *err, size_t errlen);
/* Writes to its stdin (what does not go now waits in pr->inq); -1 when its stdin is gone. */
int sv_proc_write(sv_proc_t *pr, const char *data, size_t len);
/* Stops or resumes reading its stdout (a slow stream holds the process back, through its
 * stdout pipe, instead of the supervisor holding its output). */
void sv_proc_pause(sv_proc_t *pr, int paused);
/* Ends it (stdin closed, then the signals); its session must be detached or dead. */
void sv_proc_end(sv_proc_t *pr);
/* A warning about what it wrote (rate-limited with its stderr), with its first 100 bytes. */
void sv_proc_noise(sv_proc_t *pr, const char *what, const char *line, size_t len);
/* A child was reaped (SIGCHLD): a session's process, or a descendant of one. */
void sv_proc_reaped(pid_t pid, int status);
size_t sv_proc_count(void);        /* processes not yet reaped and ended */

/* ---- connections (mcp_supervisor_http.c) ------------------------------------------------- */
enum { SV_X_NONE, SV_X_INIT, SV_X_STREAM };

struct sv_conn_t {
    sv_watch_t            w;
    mcp_reqhead_t        *head;
    sv_buf_t              in;
    sv_buf_t              out;
    sv_buf_t              body;
    long long             body_need;
    int                   state;        /* SV_C_* (mcp_supervisor_http.c) */
    int                   keep_alive;
    int                   close_after;  /* close once out is written ...               */
    int                   finished;     /* ... and the response is complete            */
    int                   dead;         /* being closed: writes do nothing */
    int                   sse;          /* a chunked SSE response is open */
    /* the exchange this connection serves, when it waits for a process */
    sv_session_t         *session;
    mcp_route_exchange_t *x;
    int                   xkind;        /* SV_X_* */
    sv_conn_t            *sess_next;    /* the session's list */
    sv_timer_t            keepalive;
    char                  principal[128];
    char                  tag[9];
    sv_conn_t            *all_prev, *all_next, *todo_next;
    int                   todo;
};

void sv_http_listen_start(int fd);
void sv_http_listen_stop(void);
void sv_http_close_all(void);
/* Responses. */
void sv_http_error(sv_conn_t *c, int status, int code, const char *extra_headers,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void sv_http_json(sv_conn_t *c, const char *body, size_t len, const char *session_id);
void sv_http_empty(sv_conn_t *c, int status);
void sv_http_sse_start(sv_conn_t *c);
void sv_http_sse_event(sv_conn_t *c, const char *data, size_t len);
void sv_http_sse_end(sv_conn_t *c);
/* Closes conn at the end of this loop turn (writes to it do nothing from now on). */
void sv_http_kill(sv_conn_t *c);
/* Runs the deferred work: closes killed connections, parses buffered requests. */
void sv_http_turn(void);

/* ---- the supervisor's state (mcp_supervisor.c) ------------------------------------------- */
typedef struct sv_state_t {
    int           epfd;
    sv_config_t  *config;          /* the current configuration (new sessions take it) */
    int           port;            /* the bound port */
    char          advertise[SV_ADVERTISE_MAX + 1];   /* "{port}" replaced */
    int           log_level;
    int           stopping;
    sv_hash_t     sessions;        /* by hex, dead ones included */
    sv_hash_t     procs;           /* by pid */
    sv_hash_t     counts;          /* live sessions by server name, by "name\nprincipal" */
    long          live;            /* live sessions on this host */
    unsigned long nofile_soft;     /* the soft RLIMIT_NOFILE before it was raised (0: same) */
} sv_state_t;
extern sv_state_t sv;

#endif
