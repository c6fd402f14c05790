/* mcp_route — the routing of one stdio session's messages. See mcp_route.h. */

#include "mcp_route.h"

#include <stdlib.h>
#include <string.h>

typedef struct req_id_t {
    char *text;
    int   answered;
} req_id_t;

struct mcp_route_exchange_t {
    mcp_route_exchange_t *prev, *next;   /* open exchanges, oldest first */
    int    kind;
    void  *owner;
    req_id_t  *ids;
    size_t n_ids;
    size_t unanswered;
    char **tokens;
    size_t n_tokens;
};

typedef struct queued_t {
    struct queued_t *next;
    size_t len;
    char   text[];
} queued_t;

typedef struct orphan_t {
    struct orphan_t *next;
    char text[];
} orphan_t;

struct mcp_route_t {
    mcp_route_exchange_t *first, *last;
    size_t     n_exchanges;
    size_t     in_flight;
    orphan_t  *orphans;
    queued_t  *qhead, *qtail;
    size_t     qcount, qbytes, qmax_count, qmax_bytes, dropped;
};

mcp_route_t *mcp_route_create(size_t queue_max_messages, size_t queue_max_bytes)
{
    mcp_route_t *r = calloc(1, sizeof(*r));

    if (!r)
        return NULL;
    r->qmax_count = queue_max_messages;
    r->qmax_bytes = queue_max_bytes;
    return r;
}

static void exchange_free(mcp_route_exchange_t *x)
{
    size_t i;

    for (i = 0; i < x->n_ids; i++)
        free(x->ids[i].text);
    for (i = 0; i < x->n_tokens; i++)
        free(x->tokens[i]);
    free(x->ids);
    free(x->tokens);
    free(x);
}

static void orphans_clear(mcp_route_t *r)
{
    while (r->orphans) {
        orphan_t *o = r->orphans;
        r->orphans = o->next;
        free(o);
        r->in_flight--;
    }
}

static void queue_clear(mcp_route_t *r)
{
    size_t len;
    char *m;

    while ((m = mcp_route_queue_pop(r, &len)) != NULL)
        free(m);
}

void mcp_route_destroy(mcp_route_t *r)
{
    if (!r)
        return;
    while (r->first) {
        mcp_route_exchange_t *x = r->first;
        r->first = x->next;
        exchange_free(x);
    }
    orphans_clear(r);
    queue_clear(r);
    free(r);
}

/* The unanswered id equal to text: its exchange and slot (*slot NULL for an orphan, whose link
 * is then *orphan_link). Returns non-zero when found. */
static int find_id(mcp_route_t *r, const char *text, mcp_route_exchange_t **xo, req_id_t **slot,
                   orphan_t ***orphan_link)
{
    mcp_route_exchange_t *x;
    orphan_t **o;
    size_t i;

    for (x = r->first; x; x = x->next) {
        for (i = 0; i < x->n_ids; i++) {
            if (!x->ids[i].answered && !strcmp(x->ids[i].text, text)) {
                *xo = x;
                *slot = &x->ids[i];
                return 1;
            }
        }
    }
    for (o = &r->orphans; *o; o = &(*o)->next) {
        if (!strcmp((*o)->text, text)) {
            *xo = NULL;
            *slot = NULL;
            *orphan_link = o;
            return 1;
        }
    }
    return 0;
}

static int in_flight(mcp_route_t *r, const char *text)
{
    mcp_route_exchange_t *x;
    req_id_t *slot;
    orphan_t **link;

    return find_id(r, text, &x, &slot, &link);
}

int mcp_route_open(mcp_route_t *r, int kind, void *owner, const char *const *ids, size_t n_ids,
                   const char *const *tokens, size_t n_tokens, mcp_route_exchange_t **out,
                   const char **dup)
{
    mcp_route_exchange_t *x;
    size_t i, j;

    *out = NULL;
    if (kind == MCP_ROUTE_GET) {
        for (x = r->first; x; x = x->next) {
            if (x->kind == MCP_ROUTE_GET)
                return MCP_ROUTE_GET_OPEN;
        }
    }
    for (i = 0; i < n_ids; i++) {
        for (j = 0; j < i; j++) {
            if (!strcmp(ids[i], ids[j])) {
                *dup = ids[i];
                return MCP_ROUTE_DUPLICATE;
            }
        }
        if (in_flight(r, ids[i])) {
            *dup = ids[i];
            return MCP_ROUTE_DUPLICATE;
        }
    }
    x = calloc(1, sizeof(*x));
    if (!x)
        return MCP_ROUTE_NOMEM;
    x->kind = kind;
    x->owner = owner;
    x->ids = calloc(n_ids ? n_ids : 1, sizeof(req_id_t));
    x->tokens = calloc(n_tokens ? n_tokens : 1, sizeof(char *));
    if (!x->ids || !x->tokens) {
        exchange_free(x);
        return MCP_ROUTE_NOMEM;
    }
    for (i = 0; i < n_ids; i++, x->n_ids++) {
        if (!(x->ids[i].text = strdup(ids[i]))) {
            exchange_free(x);
            return MCP_ROUTE_NOMEM;
        }
    }
    for (i = 0; i < n_tokens; i++, x->n_tokens++) {
        if (!(x->tokens[i] = strdup(tokens[i]))) {
            exchange_free(x);
            return MCP_ROUTE_NOMEM;
        }
    }
    x->unanswered = n_ids;
    x->prev = r->last;
    if (r->last)
        r->last->next = x;
    else
        r->first = x;
    r->last = x;
    r->n_exchanges++;
    r->in_flight += n_ids;
    *out = x;
    return MCP_ROUTE_OK;
}

void mcp_route_close(mcp_route_t *r, mcp_route_exchange_t *x)
{
    size_t i;

    /* Its unanswered ids stay in flight, as orphans (the count does not change). */
    for (i = 0; i < x->n_ids; i++) {
        orphan_t *o;
        size_t n;
        if (x->ids[i].answered)
            continue;
        n = strlen(x->ids[i].text);
        o = malloc(sizeof(*o) + n + 1);
        if (!o) {
            r->in_flight--;                /* forgotten: its answer will go as an unowned one */
            continue;
        }
        memcpy(o->text, x->ids[i].text, n + 1);
        o->next = r->orphans;
        r->orphans = o;
    }
    if (x->prev)
        x->prev->next = x->next;
    else
        r->first = x->next;
    if (x->next)
        x->next->prev = x->prev;
    else
        r->last = x->prev;
    r->n_exchanges--;
    exchange_free(x);
}

static mcp_route_exchange_t *by_token(mcp_route_t *r, const char *token)
{
    mcp_route_exchange_t *x;
    size_t i;

    for (x = r->first; x; x = x->next) {
        for (i = 0; i < x->n_tokens; i++) {
            if (!strcmp(x->tokens[i], token))
                return x;
        }
    }
    return NULL;
}

/* Where a message for nobody in particular goes: the GET stream, else the oldest POST stream. */
static mcp_route_exchange_t *for_anyone(mcp_route_t *r)
{
    mcp_route_exchange_t *x, *post = NULL;

    for (x = r->first; x; x = x->next) {
        if (x->kind == MCP_ROUTE_GET)
            return x;
        if (x->kind == MCP_ROUTE_POST && !post)
            post = x;
    }
    return post;
}

static int enqueue(mcp_route_t *r, const char *msg, size_t len)
{
    queued_t *q = malloc(sizeof(*q) + len + 1);

    if (!q)
        return MCP_ROUTE_NOMEM;
    q->next = NULL;
    q->len = len;
    memcpy(q->text, msg, len);
    q->text[len] = '\0';
    if (r->qtail)
        r->qtail->next = q;
    else
        r->qhead = q;
    r->qtail = q;
    r->qcount++;
    r->qbytes += len;
    /* The oldest go first: a client that comes back wants what is recent. The message just
     * queued stays even when it alone is over the byte bound. */
    while (r->qhead != q && (r->qcount > r->qmax_count || r->qbytes > r->qmax_bytes)) {
        size_t n;
        free(mcp_route_queue_pop(r, &n));
        r->dropped++;
    }
    return MCP_ROUTE_OK;
}

int mcp_route_message(mcp_route_t *r, const char *id, const char *token, const char *msg,
                      size_t len, mcp_route_dest_t *dest)
{
    mcp_route_exchange_t *x = NULL;
    req_id_t *slot = NULL;
    orphan_t **link = NULL;

    memset(dest, 0, sizeof(*dest));
    if (id && find_id(r, id, &x, &slot, &link)) {
        if (slot) {
            slot->answered = 1;
            x->unanswered--;
            r->in_flight--;
            dest->exchange = x;
            dest->owner = x->owner;
            dest->answered = 1;
            dest->last = x->unanswered == 0;
            return MCP_ROUTE_OK;
        }
        {
            orphan_t *o = *link;           /* an orphan's answer: for anyone */
            *link = o->next;
            free(o);
            r->in_flight--;
        }
    }
    else if (token && (x = by_token(r, token)) != NULL) {
        dest->exchange = x;
        dest->owner = x->owner;
        return MCP_ROUTE_OK;
    }
    if ((x = for_anyone(r)) != NULL) {
        dest->exchange = x;
        dest->owner = x->owner;
        return MCP_ROUTE_OK;
    }
    return enqueue(r, msg, len);
}

void mcp_route_cancel(mcp_route_t *r, const char *id, mcp_route_dest_t *dest)
{
    mcp_route_exchange_t *x = NULL;
    req_id_t *slot = NULL;
    orphan_t **link = NULL;

    memset(dest, 0, sizeof(*dest));
    if (!find_id(r, id, &x, &slot, &link))
        return;
    r->in_flight--;
    if (!slot) {
        orphan_t *o = *link;
        *link = o->next;
        free(o);
        return;
    }
    slot->answered = 1;
    x->unanswered--;
    dest->exchange = x;
    dest->owner = x->owner;
    dest->answered = 1;
    dest->last = x->unanswered == 0;
}

char *mcp_route_queue_pop(mcp_route_t *r, size_t *len)
{
    queued_t *q = r->qhead;
    char *m;

    if (!q)
        return NULL;
    r->qhead = q->next;
    if (!r->qhead)
        r->qtail = NULL;
    r->qcount--;
    r->qbytes -= q->len;
    *len = q->len;
    /* The text moves to the front of the block, which the caller frees as a plain string. */
    m = (char *)q;
    memmove(m, q->text, q->len + 1);
    return m;
}

size_t mcp_route_dropped(mcp_route_t *r)
{
    size_t n = r->dropped;

    r->dropped = 0;
    return n;
}

void mcp_route_fail_all(mcp_route_t *r, mcp_route_fail_fn *fn, void *baton)
{
    mcp_route_exchange_t *x;
    size_t i;

    for (x = r->first; x; x = x->next) {
        for (i = 0; i < x->n_ids; i++) {
            if (x->ids[i].answered)
                continue;
            x->ids[i].answered = 1;
            x->unanswered--;
            r->in_flight--;
            fn(baton, x->owner, x, x->ids[i].text);
        }
        for (i = 0; i < x->n_tokens; i++)
            free(x->tokens[i]);
        x->n_tokens = 0;
    }
    orphans_clear(r);
    queue_clear(r);
}

void *mcp_route_owner(const mcp_route_exchange_t *x)
{
    return x->owner;
}

int mcp_route_kind(const mcp_route_exchange_t *x)
{
    return x->kind;
}

size_t mcp_route_exchanges(const mcp_route_t *r)
{
    return r->n_exchanges;
}

size_t mcp_route_in_flight(const mcp_route_t *r)
{
    return r->in_flight;
}

size_t mcp_route_queued(const mcp_route_t *r)
{
    return r->qcount;
}
