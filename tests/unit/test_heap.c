/* Unit tests for mcp_heap: the order timers come due in, moving and cancelling them, and a
 * random workload checked against a plain scan. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "unit_main.h"

#include "mcp_heap.h"

typedef struct timer_t_ {
    int             id;
    mcp_heap_node_t node;
} timer_t_;

#define OWNER(n) MCP_HEAP_OWNER(n, timer_t_, node)

START_TEST(due_timers_come_in_order_and_only_when_due)
{
    mcp_heap_t h = MCP_HEAP_INIT;
    timer_t_ t[5] = {{0}};
    int64_t dues[5] = {50, 10, 40, 10, 30};
    int i, order[5], n = 0;
    mcp_heap_node_t *x;

    for (i = 0; i < 5; i++) {
        t[i].id = i;
        ck_assert_int_eq(mcp_heap_set(&h, &t[i].node, dues[i]), 0);
        ck_assert(mcp_heap_armed(&t[i].node));
    }
    ck_assert_int_eq(mcp_heap_first(&h)->due, 10);
    ck_assert_ptr_null(mcp_heap_pop_due(&h, 9));
    while ((x = mcp_heap_pop_due(&h, 45))) {
        ck_assert(!mcp_heap_armed(x));
        order[n++] = OWNER(x)->id;
    }
    ck_assert_int_eq(n, 4);                           /* 10, 10, 30, 40; 50 not yet due */
    ck_assert(order[0] == 1 || order[0] == 3);
    ck_assert(order[1] == 1 || order[1] == 3);
    ck_assert_int_eq(order[2], 4);
    ck_assert_int_eq(order[3], 2);
    ck_assert_int_eq(OWNER(mcp_heap_first(&h))->id, 0);
    mcp_heap_free(&h);
}
END_TEST

START_TEST(a_timer_moves_and_is_cancelled)
{
    mcp_heap_t h = MCP_HEAP_INIT;
    timer_t_ a = {1, {0, 0}}, b = {2, {0, 0}}, c = {3, {0, 0}};

    mcp_heap_set(&h, &a.node, 10);
    mcp_heap_set(&h, &b.node, 20);
    mcp_heap_set(&h, &c.node, 30);
    mcp_heap_set(&h, &a.node, 25);                    /* later: b is first now */
    ck_assert_int_eq(OWNER(mcp_heap_first(&h))->id, 2);
    mcp_heap_set(&h, &c.node, 5);                     /* earlier: c is first */
    ck_assert_int_eq(OWNER(mcp_heap_first(&h))->id, 3);
    ck_assert_uint_eq(h.len, 3);                      /* moved, not armed twice */
    mcp_heap_remove(&h, &c.node);
    mcp_heap_remove(&h, &c.node);                     /* twice: nothing */
    ck_assert(!mcp_heap_armed(&c.node));
    ck_assert_uint_eq(h.len, 2);
    ck_assert_int_eq(OWNER(mcp_heap_pop_due(&h, 100))->id, 2);
    ck_assert_int_eq(OWNER(mcp_heap_pop_due(&h, 100))->id, 1);
    ck_assert_ptr_null(mcp_heap_pop_due(&h, 100));
    ck_assert_ptr_null(mcp_heap_first(&h));
    mcp_heap_free(&h);
}
END_TEST

START_TEST(random_sets_and_removes_agree_with_a_scan)
{
    enum { N = 2000, OPS = 200000 };
    static timer_t_ t[N];
    mcp_heap_t h = MCP_HEAP_INIT;
    int i, op;

    srand(7);
    for (i = 0; i < N; i++) {
        t[i].id = i;
        t[i].node.slot = 0;
    }
    for (op = 0; op < OPS; op++) {
        timer_t_ *x = &t[rand() % N];
        if (rand() % 4 == 0) {
            mcp_heap_remove(&h, &x->node);
        }
        else {
            ck_assert_int_eq(mcp_heap_set(&h, &x->node, rand() % 100000), 0);
        }
        if (op % 997 == 0) {
            int64_t min = INT64_MAX;
            size_t armed = 0;
            for (i = 0; i < N; i++) {
                if (mcp_heap_armed(&t[i].node)) {
                    armed++;
                    if (t[i].node.due < min) {
                        min = t[i].node.due;
                    }
                    ck_assert_ptr_eq(h.nodes[t[i].node.slot - 1], &t[i].node);
                }
            }
            ck_assert_uint_eq(armed, h.len);
            if (armed) {
                ck_assert_int_eq(mcp_heap_first(&h)->due, min);
            }
        }
    }
    {
        int64_t last = -1;
        mcp_heap_node_t *x;
        while ((x = mcp_heap_pop_due(&h, INT64_MAX))) {
            ck_assert_int_ge(x->due, last);
            last = x->due;
        }
    }
    ck_assert_uint_eq(h.len, 0);
    mcp_heap_free(&h);
}
END_TEST

START_TEST(reserved_room_is_kept)
{
    mcp_heap_t h = MCP_HEAP_INIT;
    static timer_t_ t[300];
    int i;

    ck_assert_int_eq(mcp_heap_reserve(&h, 300), 0);
    ck_assert_uint_ge(h.cap, 300);
    for (i = 0; i < 300; i++) {
        mcp_heap_node_t **before = h.nodes;
        ck_assert_int_eq(mcp_heap_set(&h, &t[i].node, 300 - i), 0);
        ck_assert_ptr_eq(h.nodes, before);            /* no realloc within the room */
    }
    ck_assert_int_eq(mcp_heap_first(&h)->due, 1);
    mcp_heap_free(&h);
    ck_assert_uint_eq(h.cap, 0);
}
END_TEST

static void count_visit(mcp_heap_node_t *node, void *baton)
{
    int *seen = baton;
    seen[OWNER(node)->id]++;
}

START_TEST(each_due_visits_exactly_the_due_ones_once)
{
    enum { N = 5000 };
    static timer_t_ t[N];
    static int seen[N];
    mcp_heap_t h = MCP_HEAP_INIT;
    int i, visited = 0;

    srand(11);
    for (i = 0; i < N; i++) {
        t[i].id = i;
        t[i].node.slot = 0;
        mcp_heap_set(&h, &t[i].node, rand() % 10000);
    }
    mcp_heap_each_due(&h, 2500, count_visit, seen);
    for (i = 0; i < N; i++) {
        ck_assert_int_eq(seen[i], t[i].node.due <= 2500 ? 1 : 0);
        visited += seen[i];
        ck_assert(mcp_heap_armed(&t[i].node));      /* visited, not disarmed */
    }
    ck_assert_int_gt(visited, 64);
    ck_assert_uint_eq(h.len, N);
    memset(seen, 0, sizeof(seen));
    mcp_heap_each_due(&h, -1, count_visit, seen);
    for (i = 0; i < N; i++) {
        ck_assert_int_eq(seen[i], 0);
    }
    mcp_heap_free(&h);
    mcp_heap_each_due(&h, 1 << 30, count_visit, seen);   /* empty: nothing visited */
    for (i = 0; i < N; i++) {
        ck_assert_int_eq(seen[i], 0);
    }
}
END_TEST

static Suite *heap_suite(void)
{
    Suite *s = suite_create("mcp_heap");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, due_timers_come_in_order_and_only_when_due);
    tcase_add_test(tc, a_timer_moves_and_is_cancelled);
    tcase_add_test(tc, random_sets_and_removes_agree_with_a_scan);
    tcase_add_test(tc, reserved_room_is_kept);
    tcase_add_test(tc, each_due_visits_exactly_the_due_ones_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return mcp_unit_run(heap_suite());
}
