/* mcp_store_prepared — the statements a connection has prepared (see mcp_store_prepared.h):
 * an open-addressing set of 64-bit hashes, the instance data of an event procedure that libpq
 * calls when the connection is reset or finished. */
#include <stdlib.h>
#include <string.h>

#include <libpq-events.h>

#include "mcp_store_prepared.h"

typedef struct prepared_set_t {
    apr_uint64_t *slots;   /* 0: empty (a hash of 0 is stored as 1: a collision at worst) */
    int           size;    /* a power of two, or 0 before the first add                  */
    int           count;
} prepared_set_t;

static void empty(prepared_set_t *set)
{
    if (set && set->slots) {
        memset(set->slots, 0, sizeof(set->slots[0]) * set->size);
        set->count = 0;
    }
}

static int on_event(PGEventId id, void *info, void *pass_through)
{
    prepared_set_t *set;

    (void)pass_through;
    switch (id) {
    case PGEVT_CONNRESET:
        empty(PQinstanceData(((PGEventConnReset *)info)->conn, on_event));
        break;
    case PGEVT_CONNDESTROY:
        set = PQinstanceData(((PGEventConnDestroy *)info)->conn, on_event);
        if (set) {
            free(set->slots);
            free(set);
        }
        break;
    default:
        break;
    }
    return 1;
}

static apr_uint64_t key_of(apr_uint64_t hash)
{
    return hash ? hash : 1;
}

/* The slot of key in slots (size a power of two, at least one empty): where it is, or the
 * empty one where it would go. */
static int slot_of(const apr_uint64_t *slots, int size, apr_uint64_t key)
{
    int i = (int)(key & (apr_uint64_t)(size - 1));

    while (slots[i] && slots[i] != key) {
        i = (i + 1) & (size - 1);
    }
    return i;
}

int mcp_store_prepared_has(const PGconn *conn, apr_uint64_t hash)
{
    const prepared_set_t *set = PQinstanceData(conn, on_event);

    if (!set || !set->count) {
        return 0;
    }
    return set->slots[slot_of(set->slots, set->size, key_of(hash))] != 0;
}

/* Doubles the set's slots (from 64), every key rehashed. Non-zero without memory. */
static int grow(prepared_set_t *set)
{
    int size = set->size ? set->size * 2 : 64, i;
    apr_uint64_t *slots = calloc(size, sizeof(*slots));

    if (!slots) {
        return -1;
    }
    for (i = 0; i < set->size; i++) {
        if (set->slots[i]) {
            slots[slot_of(slots, size, set->slots[i])] = set->slots[i];
        }
    }
    free(set->slots);
    set->slots = slots;
    set->size = size;
    return 0;
}

void mcp_store_prepared_add(PGconn *conn, apr_uint64_t hash)
{
    prepared_set_t *set = PQinstanceData(conn, on_event);
    apr_uint64_t key = key_of(hash);
    int i;

    if (!set) {
        if (!(set = calloc(1, sizeof(*set)))) {
            return;
        }
        /* Registered once per connection, with its data at once: a connection whose
         * registration failed keeps no memory (and is prepared as before). */
        if (!PQregisterEventProc(conn, on_event, "mod_mcp prepared statements", NULL)
            || !PQsetInstanceData(conn, on_event, set)) {
            free(set);
            return;
        }
    }
    /* At most half full, so that a probe is short and always ends. */
    if ((set->count + 1) * 2 > set->size && grow(set) != 0) {
        return;
    }
    i = slot_of(set->slots, set->size, key);
    if (!set->slots[i]) {
        set->slots[i] = key;
        set->count++;
    }
}

void mcp_store_prepared_forget(PGconn *conn)
{
    empty(PQinstanceData(conn, on_event));
}

int mcp_store_prepared_count(const PGconn *conn)
{
    const prepared_set_t *set = PQinstanceData(conn, on_event);

    return set ? set->count : 0;
}
