/* mcp_lease — the leases of the streams one process owns, renewed together.
 *
 * The relaying thread of a stream may block for a long time writing to a slow client (up to
 * httpd's Timeout per write), so it does not renew its stream's lease itself: it registers the
 * stream here, and one keeper thread per process renews every registered stream that is due
 * (a third of its lease since the last renewal) in one statement, and notes each stream that
 * is no longer open — finished by another process after its lease ran out, or by its
 * session's DELETE — as lost. The relaying thread checks mcp_lease_lost before it stores
 * anything and stops at once.
 *
 * Pure code; thread-safe (one mutex, held only for list operations, never during I/O).
 */
#ifndef MCP_LEASE_H
#define MCP_LEASE_H

#include <apr_pools.h>
#include <apr_tables.h>
#include <apr_time.h>

typedef struct mcp_leases_t mcp_leases_t;
typedef struct mcp_lease_t mcp_lease_t;

/* A registry whose lifetime is p's (a child's pool). NULL when no mutex can be made. */
mcp_leases_t *mcp_leases_create(apr_pool_t *p);

/* Registers a stream renewed for lease (at least one second) every lease / 3 from now.
 * session_id is copied. The entry lives until mcp_leases_remove (malloc'd, not pooled: it is
 * shared with the keeper's thread). NULL when out of memory or ls is NULL. */
mcp_lease_t *mcp_leases_add(mcp_leases_t *ls, apr_int64_t stream_id, const char *session_id,
                            apr_interval_time_t lease, apr_time_t now);

/* Unregisters and frees it (NULL is ignored). */
void mcp_leases_remove(mcp_leases_t *ls, mcp_lease_t *l);

/* Non-zero once the keeper found the stream finished by someone else. Any thread. */
int mcp_lease_lost(mcp_leases_t *ls, const mcp_lease_t *l);

/* A batch of renewals, as the store takes them. */
typedef struct mcp_lease_batch_t {
    apr_time_t          at;         /* the time it was found due at                     */
    apr_array_header_t *ids;        /* apr_int64_t                                      */
    apr_array_header_t *sessions;   /* const char *                                     */
    apr_array_header_t *secs;       /* int: the lease in whole seconds                  */
} mcp_lease_batch_t;

/* The registered streams due for renewal at now (allocated in p): linear in them, whatever
 * the number registered. */
void mcp_leases_due(mcp_leases_t *ls, apr_pool_t *p, apr_time_t now, mcp_lease_batch_t *due);

/* The outcome of renewing a batch: the ids in alive (apr_int64_t) were renewed at now; every
 * other id of the batch is no longer open and is marked lost (and, when lost is not NULL,
 * appended to it if it was not lost before). Entries removed meanwhile are skipped. Linear in
 * the batch, logarithmic in the registered streams (scratch in due->ids's pool). */
void mcp_leases_renewed(mcp_leases_t *ls, const mcp_lease_batch_t *due,
                        const apr_array_header_t *alive, apr_time_t now,
                        apr_array_header_t *lost);

/* Number of registered streams. */
int mcp_leases_count(mcp_leases_t *ls);

#endif
