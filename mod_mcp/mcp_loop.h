/* mcp_loop — one process's event loop: what only waits holds no thread.
 *
 * The loop owns *sources*. A source is one piece of work that waits for something — in mod_mcp a
 * parked SSE stream (mod_mcp_park): a client connection, maybe a backend transfer, a timer — and
 * is run, when something happened to it, on one of a small fixed set of worker threads. Who owns
 * a source when:
 *
 *   held     from mcp_loop_src_add until mcp_loop_src_go: events are recorded but nothing runs
 *            (the thread that made it still owns what it stands for; for a parked connection,
 *            until the MPM has let go of it in its suspend_connection hook);
 *   idle     waiting in the loop: the loop thread watches its descriptor, its timer and its
 *            transfer, and touches nothing else of it;
 *   queued   something happened: it waits for a worker;
 *   running  one worker runs it (the run function gets every event recorded since the last
 *            run). A source never runs on two threads at once, so whatever it stands for (a
 *            connection's filters and pools, a request) has one owner at a time. Events that
 *            come meanwhile queue it again after the run.
 *
 * Events: MCP_LOOP_WOKEN (mcp_loop_wake, from any thread: the router says there is something to
 * read), MCP_LOOP_HANGUP (the client's side of the descriptor closed or failed),
 * MCP_LOOP_WRITABLE (asked for with want_write), MCP_LOOP_TIMER (the source's deadline passed),
 * MCP_LOOP_XFER (its backend transfer has news: headers, bytes, or its end),
 * MCP_LOOP_STOPPING (the loop is stopping: the source must release itself).
 *
 * Descriptors are watched one-shot: after an event the descriptor is quiet until the run that
 * handles it re-arms it (mcp_loop_src_fd), so a writable socket does not spin the loop while its
 * source waits for a worker. Timers are looked at every MCP_LOOP_TICK.
 *
 * Backend transfers (mcp_backend_async) run on the loop's one curl multi handle, in the loop
 * thread; their callbacks only copy what arrives into the source's transfer buffer (bounded:
 * past max_buffered bytes the transfer is paused until a run takes them), so the loop never
 * blocks on a source's work (parsing, storing, writing). A source has MCP_LOOP_SLOTS transfer
 * slots, one transfer each (a federated stream's members' GETs: several backends feeding one
 * piece of work, whose runs never overlap); slot 0 is the one the calls without _slot use.
 *
 * Pure code: APR, epoll, eventfd and libcurl; no httpd headers. Linux only (epoll).
 */
#ifndef MCP_LOOP_H
#define MCP_LOOP_H

#include <apr_pools.h>
#include <apr_time.h>

#include "mcp_backend.h"

typedef struct mcp_loop_t mcp_loop_t;
typedef struct mcp_loop_src_t mcp_loop_src_t;

#define MCP_LOOP_WOKEN     0x01u
#define MCP_LOOP_HANGUP    0x02u
#define MCP_LOOP_WRITABLE  0x04u
#define MCP_LOOP_TIMER     0x08u
#define MCP_LOOP_XFER      0x10u
#define MCP_LOOP_STOPPING  0x20u

/* libcurl's receive buffer for the loop's transfers (its default, 16 KiB, is what every idle
 * stream would hold for nothing), and for lean ones (libcurl's smallest). */
#define MCP_LOOP_BUFFER       4096
#define MCP_LOOP_LEAN_BUFFER  1024

/* Transfers a source may have at once (slots 0 .. MCP_LOOP_SLOTS - 1). */
#define MCP_LOOP_SLOTS 16

/* How often timers are looked at. */
#define MCP_LOOP_TICK apr_time_from_msec(50)

/* A source's work, on a worker thread. events: what happened since the last run (bits above). */
typedef void mcp_loop_run_fn(mcp_loop_src_t *src, unsigned events, void *baton);

/* Starts a loop with its thread and workers worker threads (1..64), in p (a child's pool): the
 * loop stops when p is cleaned up (mcp_loop_stop). NULL, with *err set (allocated in p), when
 * it cannot be made. */
mcp_loop_t *mcp_loop_create(apr_pool_t *p, int workers, const char **err);

/* Stops the loop: every source gets MCP_LOOP_STOPPING and is run; waits up to grace for them to
 * release themselves, then joins the threads (sources still there are abandoned: their
 * transfers are cut, their memory is freed, their run function is not called again). */
void mcp_loop_stop(mcp_loop_t *loop, apr_interval_time_t grace);

/* A new source, held (see above); NULL when the loop is stopping or out of memory. */
mcp_loop_src_t *mcp_loop_src_add(mcp_loop_t *loop, mcp_loop_run_fn *run, void *baton);

/* Lets a held source go: from now on it is idle or queued (queued at once when events were
 * recorded while it was held). With not_before > 0 the loop lets it go at its first look at
 * the sources after that time instead (within MCP_LOOP_TICK): for a caller that still has a few
 * instructions to run on what the source stands for (an MPM returning from its hook). */
void mcp_loop_src_go(mcp_loop_src_t *src, apr_time_t not_before);

/* For the owner of a held source: waits up to timeout for events, then returns them (consumed;
 * 0 when none came). MCP_LOOP_STOPPING when the loop is stopping. */
unsigned mcp_loop_src_wait(mcp_loop_src_t *src, apr_interval_time_t timeout);

/* Watches fd for the client's hang-up, and for writability when want_write (one-shot: call again
 * after each run that wants more). fd < 0 stops watching. Owner only (its run, or while held). */
void mcp_loop_src_fd(mcp_loop_src_t *src, int fd, int want_write);

/* During a run: a pool of the worker that runs it, cleared once the run returns, for what the
 * run needs only while it runs (so that an idle source holds no pool of its own); NULL outside
 * a run. Owner only. */
apr_pool_t *mcp_loop_src_scratch(const mcp_loop_src_t *src);

/* MCP_LOOP_TIMER once at (0: none). Owner only. */
void mcp_loop_src_timer(mcp_loop_src_t *src, apr_time_t at);

/* MCP_LOOP_WOKEN for src. Any thread; never blocks on the source. */
void mcp_loop_wake(mcp_loop_src_t *src);

/* Starts call (everything but its callbacks, which the loop sets; the body, when there is one,
 * must outlive the transfer) as src's backend transfer, on the loop's multi handle. max_buffered
 * bounds the bytes kept for the owner. lean: a transfer that mostly waits (a standalone
 * stream), read through libcurl's smallest receive buffer (MCP_LOOP_LEAN_BUFFER; an idle one
 * holds less, a busy one takes more rounds); otherwise MCP_LOOP_BUFFER. Non-zero, with *err,
 * when it cannot be started. Owner only; one transfer per slot at a time (a new one after
 * the last one's end was taken); this is slot 0's. */
int mcp_loop_src_start(mcp_loop_src_t *src, mcp_backend_pool_t *bp,
                       const mcp_backend_call_t *call, apr_size_t max_buffered, int lean,
                       const char **err);

/* The same in slot (0 .. MCP_LOOP_SLOTS - 1): one transfer per slot at a time, each with its
 * own buffer and bound; any news of any slot is one MCP_LOOP_XFER for the source (its run
 * takes each slot's). mcp_loop_src_start is slot 0's. */
int mcp_loop_src_start_slot(mcp_loop_src_t *src, int slot, mcp_backend_pool_t *bp,
                            const mcp_backend_call_t *call, apr_size_t max_buffered, int lean,
                            const char **err);

/* A pool of its own allocator (only its owner allocates in it), for work of the loop's sources
 * (a transfer's, a detached exchange's): one an earlier user gave back when there is one
 * (making a pool of its own allocator and ending it costs an mmap per block and a munmap of
 * each); NULL when out of memory. Any thread. */
apr_pool_t *mcp_loop_pool_take(mcp_loop_t *loop);

/* p back, cleared (its cleanups run now), for the next user; destroyed when enough are kept
 * or the loop is stopping. Any thread. */
void mcp_loop_pool_give(mcp_loop_t *loop, apr_pool_t *p);

/* What the transfer brought since the last take. */
typedef struct mcp_loop_news_t {
    int                    headers;   /* the response's status and headers are in response    */
    mcp_backend_response_t response;  /* (copied into the caller's pool when headers is set)  */
    const char            *data;      /* body bytes (in the caller's pool), len of them        */
    apr_size_t             len;
    int                    done;      /* the transfer ended: status, err                       */
    mcp_backend_status_t   status;
    const char            *err;
} mcp_loop_news_t;

/* Takes the news (owner only): the response's headers and the end's error are copied into p,
 * body bytes into scratch; the buffer is emptied and a transfer paused for room resumed; after
 * the end was taken the source has no transfer. Returns non-zero when there was any news. */
int mcp_loop_src_take(mcp_loop_src_t *src, apr_pool_t *p, apr_pool_t *scratch,
                      mcp_loop_news_t *news);

/* The same for slot's transfer (mcp_loop_src_take is slot 0's). */
int mcp_loop_src_take_slot(mcp_loop_src_t *src, int slot, apr_pool_t *p, apr_pool_t *scratch,
                           mcp_loop_news_t *news);

/* Cuts the source's transfer (its end comes as news, status ABORTED). Owner only. */
void mcp_loop_src_cut(mcp_loop_src_t *src);

/* The same for slot's transfer (mcp_loop_src_cut is slot 0's). */
void mcp_loop_src_cut_slot(mcp_loop_src_t *src, int slot);

/* The source is done (owner only: its run, or while held): its descriptor is no longer watched,
 * its transfers are cut, and its memory is freed after the current run returns. */
void mcp_loop_src_release(mcp_loop_src_t *src);

/* stopping() is asked at every look of the loop thread (every MCP_LOOP_TICK); once it says so,
 * every source is told MCP_LOOP_STOPPING, once, as by mcp_loop_stop, while the loop goes on
 * (a graceful restart: the process serves until its streams have ended). Set it before the
 * first source is added. */
void mcp_loop_set_stop_check(mcp_loop_t *loop, int (*stopping)(void));

/* Non-zero once mcp_loop_stop began. */
int mcp_loop_stopping(const mcp_loop_t *loop);

/* Sources in the loop (held, idle, queued or running) and transfers running (every slot's). */
void mcp_loop_stats(mcp_loop_t *loop, int *sources, int *transfers);

#endif
