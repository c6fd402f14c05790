/* mcp_heap — see mcp_heap.h. */
#include <stdlib.h>

#include "mcp_heap.h"

static void place(mcp_heap_t *h, size_t i, mcp_heap_node_t *n)
{
    h->nodes[i] = n;
    n->slot = i + 1;
}

static void sift_up(mcp_heap_t *h, size_t i)
{
    mcp_heap_node_t *n = h->nodes[i];

    while (i > 0 && h->nodes[(i - 1) / 2]->due > n->due) {
        place(h, i, h->nodes[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    place(h, i, n);
}

static void sift_down(mcp_heap_t *h, size_t i)
{
    mcp_heap_node_t *n = h->nodes[i];

    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->len) {
            break;
        }
        if (c + 1 < h->len && h->nodes[c + 1]->due < h->nodes[c]->due) {
            c++;
        }
        if (h->nodes[c]->due >= n->due) {
            break;
        }
        place(h, i, h->nodes[c]);
        i = c;
    }
    place(h, i, n);
}

void mcp_heap_remove(mcp_heap_t *h, mcp_heap_node_t *node)
{
    size_t i;
    mcp_heap_node_t *moved;

    if (!node->slot) {
        return;
    }
    i = node->slot - 1;
    node->slot = 0;
    if (i == --h->len) {
        return;
    }
    moved = h->nodes[h->len];
    place(h, i, moved);
    sift_up(h, i);
    sift_down(h, moved->slot - 1);
}

int mcp_heap_reserve(mcp_heap_t *h, size_t n)
{
    size_t cap = h->cap ? h->cap : 64;
    mcp_heap_node_t **nodes;

    if (n <= h->cap) {
        return 0;
    }
    while (cap < n) {
        cap *= 2;
    }
    if (!(nodes = realloc(h->nodes, cap * sizeof(*nodes)))) {
        return -1;
    }
    h->nodes = nodes;
    h->cap = cap;
    return 0;
}

int mcp_heap_set(mcp_heap_t *h, mcp_heap_node_t *node, int64_t due)
{
    if (node->slot) {
        int64_t was = node->due;
        node->due = due;
        if (due < was) {
            sift_up(h, node->slot - 1);
        }
        else if (due > was) {
            sift_down(h, node->slot - 1);
        }
        return 0;
    }
    if (mcp_heap_reserve(h, h->len + 1) != 0) {
        return -1;
    }
    node->due = due;
    h->nodes[h->len] = node;
    node->slot = ++h->len;
    sift_up(h, h->len - 1);
    return 0;
}

mcp_heap_node_t *mcp_heap_first(const mcp_heap_t *h)
{
    return h->len ? h->nodes[0] : NULL;
}

mcp_heap_node_t *mcp_heap_pop_due(mcp_heap_t *h, int64_t now)
{
    mcp_heap_node_t *n = mcp_heap_first(h);

    if (!n || n->due > now) {
        return NULL;
    }
    mcp_heap_remove(h, n);
    return n;
}

/* Depth-first from node i: the tree's height (log2 of the nodes) bounds the recursion. */
static void each_due_from(const mcp_heap_t *h, size_t i, int64_t at,
                          void (*visit)(mcp_heap_node_t *node, void *baton), void *baton)
{
    if (i >= h->len || h->nodes[i]->due > at) {
        return;
    }
    visit(h->nodes[i], baton);
    each_due_from(h, 2 * i + 1, at, visit, baton);
    each_due_from(h, 2 * i + 2, at, visit, baton);
}

void mcp_heap_each_due(const mcp_heap_t *h, int64_t at,
                       void (*visit)(mcp_heap_node_t *node, void *baton), void *baton)
{
    each_due_from(h, 0, at, visit, baton);
}

void mcp_heap_free(mcp_heap_t *h)
{
    free(h->nodes);
    h->nodes = NULL;
    h->len = h->cap = 0;
}
