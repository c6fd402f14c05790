/* mcp_heap — a binary min-heap of timers, each embedded in what it times: the next due is found
 * in O(1), and arming, moving or cancelling one costs O(log n), whatever the number of others.
 * For loops that keep thousands of timers (a process's parked streams, their leases, the stdio
 * supervisor's sessions), where a walk over every one at each look would cost more than the
 * work the timers stand for.
 *
 * The node lives in its owner's struct (mcp_heap_node_t as a member; the owner is found back
 * with offsetof); the heap holds pointers to nodes and grows its array as needed. Due times
 * are any int64 clock the caller chooses (apr_time_t, milliseconds), compared only to each
 * other. Not thread-safe: the caller serialises (the loop's mutex, one thread).
 *
 * Pure code: libc only.
 */
#ifndef MCP_HEAP_H
#define MCP_HEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct mcp_heap_node_t {
    int64_t due;
    size_t  slot;   /* index in the heap + 1; 0: not in the heap */
} mcp_heap_node_t;

typedef struct mcp_heap_t {
    mcp_heap_node_t **nodes;
    size_t            len, cap;
} mcp_heap_t;

/* An empty heap: {0} or memset 0 will do too. */
#define MCP_HEAP_INIT { NULL, 0, 0 }

/* Arms node at due, or moves it there when it is armed already. Non-zero (nothing changed) when
 * the array could not grow. */
int mcp_heap_set(mcp_heap_t *h, mcp_heap_node_t *node, int64_t due);

/* Makes room for n armed nodes, so that arming up to n cannot fail. Non-zero when it cannot. */
int mcp_heap_reserve(mcp_heap_t *h, size_t n);

/* Disarms node (nothing when it is not armed). */
void mcp_heap_remove(mcp_heap_t *h, mcp_heap_node_t *node);

/* The node due first, or NULL when none is armed. */
mcp_heap_node_t *mcp_heap_first(const mcp_heap_t *h);

/* The first node due at or before now, disarmed; NULL when none is due. */
mcp_heap_node_t *mcp_heap_pop_due(mcp_heap_t *h, int64_t now);

/* Calls visit for every node due at or before at, without disarming any (in no particular
 * order; linear in those, whatever the number of others: a subtree is skipped at its root).
 * visit must not arm, move or disarm nodes. */
void mcp_heap_each_due(const mcp_heap_t *h, int64_t at,
                      void (*visit)(mcp_heap_node_t *node, void *baton), void *baton);

/* The struct of type that holds node as its member (an armed node's owner). */
#define MCP_HEAP_OWNER(node, type, member) ((type *)((char *)(node) - offsetof(type, member)))

/* Non-zero when node is armed. */
#define mcp_heap_armed(node) ((node)->slot != 0)

/* Frees the array (the nodes are their owners'); the heap is empty after. */
void mcp_heap_free(mcp_heap_t *h);

#endif
