/* mcp_supervisor_proc.c — the processes of the sessions (docs/stdio.md, "Process lifetime"):
 * started by mcp_proc, their stdout read as lines for their session (sv_session_line), their
 * stderr logged with a rate limit, their stdin written through a bounded queue, ended (stdin
 * closed, SIGTERM, SIGKILL to the group, timed here) and reaped (sv_proc_reaped, from SIGCHLD).
 *
 * A process outlives its session for as long as ending it takes: it is freed once reaped and
 * its group is gone, or once reaped after the SIGKILL. Its death, or a line over max_line, or a
 * stdout closed, ends its session (sv_session_died) with the reason.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "mcp_supervisor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static sv_proc_t *procs;
static size_t nprocs;

/* ---- log lines of a process, rate-limited ------------------------------------------------- */

/* Whether one more line of pr may be logged now (a burst, then a rate); the suppressed count is
 * told before the next one that is. */
static int may_log(sv_proc_t *pr)
{
    uint64_t now = sv_now();

    pr->tokens += (double)(now - pr->refill_at) * SV_STDERR_RATE / 1000.0;
    if (pr->tokens > SV_STDERR_BURST)
        pr->tokens = SV_STDERR_BURST;
    pr->refill_at = now;
    if (pr->tokens < 1) {
        pr->suppressed++;
        return 0;
    }
    pr->tokens -= 1;
    if (pr->suppressed) {
        sv_log(SV_WARN, "%s: %ld stderr lines not logged (at most %d a second after a burst "
               "of %d)", pr->label, pr->suppressed, SV_STDERR_RATE, SV_STDERR_BURST);
        pr->suppressed = 0;
    }
    return 1;
}

void sv_proc_noise(sv_proc_t *pr, const char *what, const char *line, size_t len)
{
    char quoted[128];
    size_t i, n = len < 100 ? len : 100;

    if (!may_log(pr))
        return;
    for (i = 0; i < n; i++)
        quoted[i] = (line[i] >= 0x20 && line[i] < 0x7f) ? line[i] : '?';
    quoted[n] = '\0';
    sv_log(SV_WARN, "%s: %s, ignored: \"%s\"%s", pr->label, what, quoted, len > n ? "..." : "");
}

/* ---- processes ------------------------------------------------------------------------------ */

static void proc_free(sv_proc_t *pr)
{
    if (pr->freed)
        return;
    pr->freed = 1;
    if (pr->suppressed)
        sv_log(SV_WARN, "%s: %ld stderr lines not logged", pr->label, pr->suppressed);
    sv_timer_cancel(&pr->end_timer);
    sv_timer_cancel(&pr->eof_timer);
    sv_watch_del(&pr->out_w);
    sv_watch_del(&pr->err_w);
    sv_watch_del(&pr->in_w);
    mcp_proc_close(&pr->p);
    mcp_lines_destroy(pr->out_lines);
    mcp_lines_destroy(pr->err_lines);
    sv_buf_free(&pr->inq);
    sv_hash_del(&sv.procs, &pr->node);
    if (pr->prev)
        pr->prev->next = pr->next;
    else
        procs = pr->next;
    if (pr->next)
        pr->next->prev = pr->prev;
    nprocs--;
    if (pr->session)
        pr->session->proc = NULL;
    sv_log(SV_DEBUG, "%s: process %d ended and reaped", pr->label, (int)pr->p.pid);
    sv_defer(free, pr);
}

static void end_step(sv_timer_t *t)
{
    sv_proc_t *pr = t->data;
    long next;

    if (pr->reaped && !mcp_proc_group_alive(&pr->p)) {
        proc_free(pr);
        return;
    }
    next = mcp_proc_end_next(&pr->p, (long)pr->grace_ms);
    sv_log(SV_DEBUG, "%s: %s sent to process group %d", pr->label,
           pr->p.ending == 2 ? "SIGTERM" : "SIGKILL", (int)pr->p.pid);
    if (next >= 0)
        sv_timer_set(&pr->end_timer, (uint64_t)next, end_step, pr);
    else if (pr->reaped)
        proc_free(pr);
}

/* Ends the process: stdin closed now, then the signals (mcp_proc_end_*). */
void sv_proc_end(sv_proc_t *pr)
{
    long delay;

    if (pr->p.ending || pr->freed)
        return;
    sv_watch_del(&pr->in_w);
    sv_buf_free(&pr->inq);
    delay = mcp_proc_end_begin(&pr->p, (long)pr->grace_ms);
    if (pr->reaped && !mcp_proc_group_alive(&pr->p)) {
        proc_free(pr);
        return;
    }
    sv_timer_set(&pr->end_timer, (uint64_t)delay, end_step, pr);
}

static void in_ready(sv_watch_t *w, uint32_t events);

/* Writes to the process's stdin, what does not go now later (in_w). -1 when stdin is gone. */
int sv_proc_write(sv_proc_t *pr, const char *data, size_t len)
{
    if (pr->p.in_fd < 0)
        return -1;
    if (!sv_buf_pending(&pr->inq)) {
        ssize_t n = write(pr->p.in_fd, data, len);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            sv_log(SV_INFO, "%s: its stdin: %s", pr->label, strerror(errno));
            return -1;
        }
        if (n < 0)
            n = 0;
        data += n;
        len -= (size_t)n;
        if (!len)
            return 0;
    }
    sv_buf_add(&pr->inq, data, len);
    if (pr->in_w.fd < 0)
        sv_watch_add(&pr->in_w, pr->p.in_fd, EPOLLOUT, in_ready, pr);
    return 0;
}

static void in_ready(sv_watch_t *w, uint32_t events)
{
    sv_proc_t *pr = w->data;

    (void)events;
    while (sv_buf_pending(&pr->inq)) {
        ssize_t n = write(pr->p.in_fd, pr->inq.data + pr->inq.off, sv_buf_pending(&pr->inq));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            sv_log(SV_INFO, "%s: its stdin: %s", pr->label, strerror(errno));
            sv_buf_free(&pr->inq);
            break;
        }
        sv_buf_consume(&pr->inq, (size_t)n);
    }
    sv_buf_free(&pr->inq);               /* what a burst grew is not kept */
    sv_watch_del(w);
}

static int stdout_line(void *baton, const char *line, size_t len, int cut)
{
    sv_proc_t *pr = baton;

    (void)cut;
    return !pr->session || sv_session_line(pr->session, line, len) ? 1 : 0;
}

static int stderr_line(void *baton, const char *line, size_t len, int cut)
{
    sv_proc_t *pr = baton;
    size_t n = len < sizeof(pr->last_stderr) - 1 ? len : sizeof(pr->last_stderr) - 1;

    if (!len)
        return 0;
    memcpy(pr->last_stderr, line, n);
    pr->last_stderr[n] = '\0';
    if (may_log(pr))
        sv_log(SV_WARN, "%s: stderr: %.*s%s", pr->label, (int)len, line, cut ? " [cut]" : "");
    return 0;
}

static void eof_wait_over(sv_timer_t *t)
{
    sv_proc_t *pr = t->data;

    if (pr->session)
        sv_session_died(pr->session, "closed its stdout");
    sv_proc_end(pr);
}

/* Reads one chunk of stdout; 0 at EOF or error, 1 when there may be more. */
static int read_stdout(sv_proc_t *pr)
{
    char buf[SV_CHUNK];
    ssize_t n;
    int rc;

    if (pr->out_w.fd < 0)
        return 0;
    n = read(pr->p.out_fd, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n > 0) {
        rc = mcp_lines_feed(pr->out_lines, buf, (size_t)n, stdout_line, pr);
        if (rc == MCP_LINES_TOO_LONG || rc == MCP_LINES_NOMEM) {
            char what[128];
            snprintf(what, sizeof(what), "was ended: it wrote a line over %zu bytes",
                     pr->max_line);
            sv_watch_del(&pr->out_w);
            if (pr->session)
                sv_session_died(pr->session, what);
            sv_proc_end(pr);
            return 0;
        }
        return 1;
    }
    /* EOF (or an error, which means the same here). */
    mcp_lines_finish(pr->out_lines, stdout_line, pr);
    sv_watch_del(&pr->out_w);
    if (pr->session) {
        if (pr->reaped) {
            char what[128];
            mcp_proc_describe_status(pr->status, what, sizeof(what));
            sv_session_died(pr->session, what);
        }
        else {
            /* The exit status is a better reason than this, and usually comes at once. */
            sv_timer_set(&pr->eof_timer, SV_EOF_WAIT_MS, eof_wait_over, pr);
        }
    }
    return 0;
}

static int read_stderr(sv_proc_t *pr)
{
    char buf[SV_CHUNK];
    ssize_t n;

    if (pr->err_w.fd < 0)
        return 0;
    n = read(pr->p.err_fd, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n > 0) {
        mcp_lines_feed(pr->err_lines, buf, (size_t)n, stderr_line, pr);
        return 1;
    }
    mcp_lines_finish(pr->err_lines, stderr_line, pr);
    sv_watch_del(&pr->err_w);
    return 0;
}

static void out_ready(sv_watch_t *w, uint32_t events)
{
    (void)events;
    read_stdout(w->data);
}

static void err_ready(sv_watch_t *w, uint32_t events)
{
    (void)events;
    read_stderr(w->data);
}

void sv_proc_pause(sv_proc_t *pr, int paused)
{
    if (pr->paused == paused || pr->out_w.fd < 0)
        return;
    pr->paused = paused;
    sv_watch_mod(&pr->out_w, paused ? 0 : EPOLLIN);
    sv_log(SV_DEBUG, "%s: reading its stdout %s", pr->label,
           paused ? "paused: a stream is over 8 MiB behind" : "resumed");
}

void sv_proc_reaped(pid_t pid, int status)
{
    char key[16], what[128];
    sv_proc_t *pr;
    int i;

    snprintf(key, sizeof(key), "%d", (int)pid);
    pr = (sv_proc_t *)sv_hash_get(&sv.procs, key);
    if (!pr) {
        sv_log(SV_DEBUG, "reaped process %d (a descendant of a stdio server)", (int)pid);
        return;
    }
    pr->reaped = 1;
    pr->status = status;
    mcp_proc_describe_status(status, what, sizeof(what));
    sv_log(pr->session ? SV_INFO : SV_DEBUG, "%s: process %d %s", pr->label, (int)pid, what);
    /* What it wrote before it went is in the pipes: its last answers, its last stderr line.
     * Bounded: a descendant may hold the pipes and go on writing. */
    for (i = 0; i < 256 && read_stderr(pr); i++)
        ;
    for (i = 0; i < 1024 && pr->session && read_stdout(pr); i++)
        ;
    if (pr->session)
        sv_session_died(pr->session, what);
    if (!pr->p.ending)
        sv_proc_end(pr);
    else if (pr->p.ending == 3 || !mcp_proc_group_alive(&pr->p))
        proc_free(pr);
}

sv_proc_t *sv_proc_start(sv_session_t *s, char *err, size_t errlen)
{
    sv_proc_t *pr = sv_xcalloc(1, sizeof(*pr));

    if (mcp_proc_spawn(&s->server->spec, &pr->p, err, errlen) < 0) {
        free(pr);
        return NULL;
    }
    pr->session = s;
    pr->grace_ms = s->server->stop_grace_ms;
    pr->max_line = s->server->max_line;
    pr->tokens = SV_STDERR_BURST;
    pr->refill_at = sv_now();
    pr->out_w.fd = pr->err_w.fd = pr->in_w.fd = -1;
    snprintf(pr->label, sizeof(pr->label), "%s/%s", s->server->name, s->tag);
    snprintf(pr->pidkey, sizeof(pr->pidkey), "%d", (int)pr->p.pid);
    pr->out_lines = mcp_lines_create(s->server->max_line, MCP_LINES_REFUSE);
    pr->err_lines = mcp_lines_create(SV_STDERR_LINE, MCP_LINES_CUT);
    if (!pr->out_lines || !pr->err_lines) {
        sv_log(SV_EMERG, "out of memory");
        abort();
    }
    sv_hash_put(&sv.procs, &pr->node, pr->pidkey);
    pr->next = procs;
    if (procs)
        procs->prev = pr;
    procs = pr;
    nprocs++;
    sv_watch_add(&pr->out_w, pr->p.out_fd, EPOLLIN, out_ready, pr);
    sv_watch_add(&pr->err_w, pr->p.err_fd, EPOLLIN, err_ready, pr);
    return pr;
}

size_t sv_proc_count(void)
{
    return nprocs;
}
