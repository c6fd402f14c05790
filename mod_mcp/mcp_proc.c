/* mcp_proc — starting and ending a stdio server process. See mcp_proc.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2, close_range, getgrouplist */
#endif

#include "mcp_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *user_text(unsigned long uid)
{
    static char buf[32];

    snprintf(buf, sizeof(buf), "#%lu", uid);
    return buf;
}

int mcp_proc_resolve_user(mcp_proc_spec_t *spec, const char *user, const char *group,
                          char *err, size_t errlen)
{
    char name[256];

    spec->set_ids = 0;
    spec->ngroups = 0;
    if (!user && !group)
        return 0;
    spec->uid = getuid();
    spec->gid = getgid();
    if (user && user[0] == '#') {
        /* httpd's User takes "#<uid>": that uid, with its user's groups when it has one. */
        char *end;
        unsigned long uid = strtoul(user + 1, &end, 10);
        struct passwd *pw;
        if (!user[1] || *end || uid > 0x7fffffffUL) {
            snprintf(err, errlen, "user \"%s\" is not #<number>", user);
            return -1;
        }
        spec->uid = (uid_t)uid;
        pw = getpwuid(spec->uid);
        /* Copied: getpwnam below reuses the buffer pw points into. */
        if (pw)
            snprintf(name, sizeof(name), "%s", pw->pw_name);
        user = pw ? name : NULL;
        spec->ngroups = 0;
        if (!pw && !group) {
            snprintf(err, errlen, "user %s has no name, so no group: give a group", user_text(uid));
            return -1;
        }
    }
    if (user) {
        struct passwd *pw;
        int n = MCP_PROC_MAX_GROUPS;
        errno = 0;
        pw = getpwnam(user);
        if (!pw) {
            snprintf(err, errlen, "no user named %s%s%s", user, errno ? ": " : "",
                     errno ? strerror(errno) : "");
            return -1;
        }
        spec->uid = pw->pw_uid;
        spec->gid = pw->pw_gid;
        if (getgrouplist(user, pw->pw_gid, spec->groups, &n) < 0) {
            snprintf(err, errlen, "user %s is in more than %d groups", user,
                     MCP_PROC_MAX_GROUPS);
            return -1;
        }
        spec->ngroups = (size_t)n;
    }
    if (group && group[0] == '#') {
        char *end;
        unsigned long gid = strtoul(group + 1, &end, 10);
        if (!group[1] || *end || gid > 0x7fffffffUL) {
            snprintf(err, errlen, "group \"%s\" is not #<number>", group);
            return -1;
        }
        spec->gid = (gid_t)gid;
        spec->groups[0] = spec->gid;
        spec->ngroups = 1;
    }
    else if (group) {
        struct group *gr;
        errno = 0;
        gr = getgrnam(group);
        if (!gr) {
            snprintf(err, errlen, "no group named %s%s%s", group, errno ? ": " : "",
                     errno ? strerror(errno) : "");
            return -1;
        }
        spec->gid = gr->gr_gid;
        spec->groups[0] = gr->gr_gid;
        spec->ngroups = 1;
    }
    spec->set_ids = 1;
    return 0;
}

/* What the child writes to the error pipe when a step fails: the step and errno. */
typedef struct child_error_t {
    int  err;
    char step[24];
} child_error_t;

static void child_fail(int fd, const char *step)
{
    child_error_t ce;
    size_t n = strlen(step);
    ssize_t w;

    memset(&ce, 0, sizeof(ce));
    ce.err = errno;
    memcpy(ce.step, step, n < sizeof(ce.step) - 1 ? n : sizeof(ce.step) - 1);
    w = write(fd, &ce, sizeof(ce));
    (void)w;
    _exit(127);
}

/* Closes every descriptor from lowest up: close_range when the kernel has it, else one by one
 * up to the descriptor limit. */
static void close_from(int lowest)
{
    struct rlimit rl;
    int fd, max = 65536;

    if (close_range((unsigned)lowest, ~0U, 0) == 0)
        return;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
        && rl.rlim_cur < (rlim_t)max)
        max = (int)rl.rlim_cur;
    for (fd = lowest; fd < max; fd++)
        close(fd);
}

/* The child, between fork and execve: async-signal-safe calls only. Never returns. */
static void child(const mcp_proc_spec_t *spec, int in_r, int out_w, int err_w, int report,
                  pid_t parent)
{
    sigset_t none;
    size_t i;
    int sig;

    /* The descriptors: 0, 1, 2 the pipes, 3 the error report, nothing else. dup2 onto its own
     * number would keep close-on-exec, so each goes through a number above 3 first. */
    if ((in_r = fcntl(in_r, F_DUPFD, 10)) < 0 || (out_w = fcntl(out_w, F_DUPFD, 10)) < 0
        || (err_w = fcntl(err_w, F_DUPFD, 10)) < 0 || (report = fcntl(report, F_DUPFD, 10)) < 0)
        child_fail(report, "dup");
    if (dup2(in_r, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0 || dup2(report, 3) < 0)
        child_fail(report, "dup2");
    report = 3;
    if (fcntl(report, F_SETFD, FD_CLOEXEC) < 0)
        child_fail(report, "fcntl");
    close_from(4);

    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (sig = 1; sig < NSIG; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP)
            signal(sig, SIG_DFL);      /* fails harmlessly for the numbers glibc reserves */
    }
    if (setpgid(0, 0) < 0)
        child_fail(report, "setpgid");
    if (spec->nofile_soft) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && (rlim_t)spec->nofile_soft < rl.rlim_cur) {
            rl.rlim_cur = (rlim_t)spec->nofile_soft;
            if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                child_fail(report, "setrlimit");
        }
    }
    for (i = 0; i < spec->nlimits; i++) {
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = (rlim_t)spec->limits[i].value;
        if (setrlimit(spec->limits[i].resource, &rl) < 0)
            child_fail(report, "setrlimit");
    }
    if (spec->set_ids && geteuid() == 0) {
        if (setgroups(spec->ngroups, spec->groups) < 0)
            child_fail(report, "setgroups");
        if (setgid(spec->gid) < 0)
            child_fail(report, "setgid");
        if (setuid(spec->uid) < 0)
            child_fail(report, "setuid");
    }
    /* After the credentials change, which clears the parent-death signal. A parent that died
     * before this line would not send it: then nobody is left to serve, so go. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
        child_fail(report, "prctl");
    if (getppid() != parent)
        _exit(127);
    if (chdir(spec->directory ? spec->directory : "/") < 0)
        child_fail(report, "chdir");
    execve(spec->argv[0], spec->argv, spec->envp);
    child_fail(report, "execve");
}

static int nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void close_all(int *fds, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
}

int mcp_proc_spawn(const mcp_proc_spec_t *spec, mcp_proc_t *p, char *err, size_t errlen)
{
    /* in[2], out[2], errp[2], report[2] */
    int fds[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    pid_t parent = getpid(), pid;
    child_error_t ce;
    ssize_t n;
    int i;

    memset(p, 0, sizeof(*p));
    p->pid = -1;
    p->in_fd = p->out_fd = p->err_fd = -1;
    for (i = 0; i < 8; i += 2) {
        if (pipe2(fds + i, O_CLOEXEC) < 0) {
            snprintf(err, errlen, "pipe: %s", strerror(errno));
            close_all(fds, 8);
            return -1;
        }
    }
    pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close_all(fds, 8);
        return -1;
    }
    if (pid == 0)
        child(spec, fds[0], fds[3], fds[5], fds[7], parent);
    /* Also here, so that a kill of the group right after this cannot miss it. */
    setpgid(pid, pid);
    close(fds[0]);
    close(fds[3]);
    close(fds[5]);
    close(fds[7]);
    do {
        n = read(fds[6], &ce, sizeof(ce));
    } while (n < 0 && errno == EINTR);
    close(fds[6]);
    if (n == (ssize_t)sizeof(ce)) {
        int status;
        ce.step[sizeof(ce.step) - 1] = '\0';
        if (!strcmp(ce.step, "execve"))
            snprintf(err, errlen, "execve %s: %s", spec->argv[0], strerror(ce.err));
        else if (!strcmp(ce.step, "chdir"))
            snprintf(err, errlen, "chdir %s: %s", spec->directory ? spec->directory : "/",
                     strerror(ce.err));
        else
            snprintf(err, errlen, "%s: %s", ce.step, strerror(ce.err));
        close(fds[1]);
        close(fds[2]);
        close(fds[4]);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        return -1;
    }
    p->pid = pid;
    p->in_fd = fds[1];
    p->out_fd = fds[2];
    p->err_fd = fds[4];
    if (nonblock(p->in_fd) < 0 || nonblock(p->out_fd) < 0 || nonblock(p->err_fd) < 0) {
        /* Unlikely; the process runs, so it is ended as any other would be. */
        snprintf(err, errlen, "fcntl O_NONBLOCK: %s", strerror(errno));
        kill(-pid, SIGKILL);
        mcp_proc_close(p);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        p->pid = -1;
        return -1;
    }
    return 0;
}

long mcp_proc_end_begin(mcp_proc_t *p, long grace_ms)
{
    if (p->in_fd >= 0) {
        close(p->in_fd);
        p->in_fd = -1;
    }
    p->ending = 1;
    return grace_ms / 2;
}

long mcp_proc_end_next(mcp_proc_t *p, long grace_ms)
{
    if (p->ending < 2) {
        if (p->in_fd >= 0) {
            close(p->in_fd);
            p->in_fd = -1;
        }
        kill(-p->pid, SIGTERM);
        p->ending = 2;
        return grace_ms - grace_ms / 2;
    }
    kill(-p->pid, SIGKILL);
    p->ending = 3;
    return -1;
}

int mcp_proc_group_alive(const mcp_proc_t *p)
{
    return p->pid > 0 && (kill(-p->pid, 0) == 0 || errno == EPERM);
}

void mcp_proc_close(mcp_proc_t *p)
{
    if (p->in_fd >= 0)
        close(p->in_fd);
    if (p->out_fd >= 0)
        close(p->out_fd);
    if (p->err_fd >= 0)
        close(p->err_fd);
    p->in_fd = p->out_fd = p->err_fd = -1;
}

pid_t mcp_proc_reap(int *status)
{
    pid_t pid;

    do {
        pid = waitpid(-1, status, WNOHANG);
    } while (pid < 0 && errno == EINTR);
    return pid;
}

void mcp_proc_describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "ended with wait status 0x%x", (unsigned)status);
}
