/* mcp_memo — a small per-process cache of texts by key, each kept until its own expiry: what
 * one process learned of its backends (the era shim's server/discover results, mod_mcp_shim;
 * the backends' protocol eras, mod_mcp_eras), so that the request path asks no backend and runs
 * no statement for it.
 *
 * A fixed number of slots (the caller's static array); a new key takes a free slot, else the one
 * that expires first. An expired value stays readable (as stale) until its slot is taken. One
 * mutex per cache; keys and values are malloc'd (never a pool's: the cache outlives requests).
 * Pure code: no httpd headers.
 */
#ifndef MCP_MEMO_H
#define MCP_MEMO_H

#include <pthread.h>

#include <apr_pools.h>
#include <apr_time.h>

typedef struct mcp_memo_slot_t {
    char       *key;
    char       *value;     /* may be NULL: kept as "nothing known" */
    apr_time_t  expires;
} mcp_memo_slot_t;

typedef struct mcp_memo_t {
    pthread_mutex_t  lock;
    int              n;
    mcp_memo_slot_t *slots;
} mcp_memo_t;

/* A static cache over a static array of slots: static mcp_memo_t m = MCP_MEMO_INIT(slots); */
#define MCP_MEMO_INIT(array) \
    { PTHREAD_MUTEX_INITIALIZER, (int)(sizeof(array) / sizeof((array)[0])), (array) }

/* 1 while key's value is fresh at now, else 0 (expired, or unknown). *value gets the value kept,
 * fresh or expired, copied into p; NULL when there is none (or it was kept as NULL). */
int mcp_memo_get(mcp_memo_t *m, apr_pool_t *p, const char *key, apr_time_t now,
                 const char **value);

/* Keeps value (may be NULL) for key until expires, replacing what key had. Out of memory,
 * nothing is kept for key. */
void mcp_memo_put(mcp_memo_t *m, const char *key, const char *value, apr_time_t expires);

#endif
