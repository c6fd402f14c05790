/* mcp_refresh — one process's re-reads of things cached for everyone (in PostgreSQL), one at a
 * time per thing.
 *
 * When a cached thing gets too old under load, every request in flight finds it old at once
 * and would read it again (the era bridge's tool list: a tools/list round trip to the backend
 * and an update of the pooled session's row, which they would take in turn). Here one of them
 * reads; the others, and whoever found it old before that read ended, go on with the copy they
 * found (it is at most that read's time older than it may be).
 *
 * A caller that has no copy to go on with (the era bridge's empty pool: a pooled session to
 * initialize) waits for the read under way instead (mcp_refresh_await), then reads what it
 * stored.
 *
 * A thing is named by a key (a pooled session's id, a pool's key). The table holds the capacity
 * most recently read keys; with every entry being read, or a key too long, the caller reads
 * (never a refusal, and a wait only in mcp_refresh_await, bounded by its caller). A read that
 * never ends (its thread stuck past stuck_after) no longer holds the others back.
 *
 * Pure code: APR only; thread-safe (one mutex, held for table look-ups only; awaiting callers
 * sleep on a condition variable).
 */
#ifndef MCP_REFRESH_H
#define MCP_REFRESH_H

#include <apr_pools.h>
#include <apr_time.h>

/* Keys are at most this long (bytes, without the terminating NUL). */
#define MCP_REFRESH_KEY_MAX 63

typedef struct mcp_refresh_t mcp_refresh_t;

/* A table of capacity keys (1 or more), living as long as p (a child's pool). NULL when no
 * mutex or condition variable can be made. */
mcp_refresh_t *mcp_refresh_create(apr_pool_t *p, int capacity, apr_interval_time_t stuck_after);

/* The caller found key's copy old; found_at: when it asked for that copy (before the answer).
 * 1: the caller reads it again now and calls mcp_refresh_done(key) when it is stored (or
 * failed); 0: another thread is reading it, or one ended since found_at: the caller goes on
 * with its copy. r NULL: 1. */
int mcp_refresh_begin(mcp_refresh_t *r, const char *key, apr_time_t found_at, apr_time_t now);

/* As mcp_refresh_begin, for a caller with no copy to go on with: while another thread reads
 * key, it waits for that read to end (until the clock passes until at most). 1: the caller
 * reads now (and calls mcp_refresh_done), also when it waited until until; 0: a read ended
 * since found_at (perhaps the one it waited for): the caller reads the stored copy, which is
 * at least that new. r NULL: 1. */
int mcp_refresh_await(mcp_refresh_t *r, const char *key, apr_time_t found_at, apr_time_t until);

/* The read that mcp_refresh_begin or mcp_refresh_await gave the caller ended at now; the
 * callers awaiting it go on. */
void mcp_refresh_done(mcp_refresh_t *r, const char *key, apr_time_t now);

/* How many callers are awaiting a read of key now (the unit tests wait for them with it). */
int mcp_refresh_awaiting(mcp_refresh_t *r, const char *key);

#endif
