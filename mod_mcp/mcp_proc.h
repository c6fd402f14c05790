/* mcp_proc — starting and ending one stdio server process for the supervisor
 * (docs/stdio.md, "Process lifetime").
 *
 * Starting: fork + execve of an argv with an explicit environment (nothing inherited), in a
 * directory, optionally as another user and group (only when the caller is root), under
 * rlimits; the process leads its own process group (setpgid) and gets PR_SET_PDEATHSIG
 * SIGKILL, so that a supervisor killed with -9 leaves nothing running; it has exactly three
 * descriptors, pipes to the caller (every other descriptor is closed), default signal
 * dispositions and an empty signal mask. What goes wrong between fork and execve (chdir,
 * setuid, execve itself, ...) comes back through a close-on-exec pipe as errno and the step's
 * name, so that the caller can say "execve /usr/bin/x: No such file or directory".
 *
 * Ending (mcp_proc_end_*): close its stdin (a well-behaved stdio server exits at EOF), SIGTERM
 * to its group after grace/2, SIGKILL to the group after grace. The caller keeps the timers;
 * these functions take the steps.
 *
 * Reaping is the caller's: the supervisor is PR_SET_CHILD_SUBREAPER and reaps every child,
 * a process's descendants included, with waitpid(-1) (mcp_proc_reap).
 *
 * Pure code: libc and Linux only (no APR, no httpd headers). Between fork and execve the child
 * calls only async-signal-safe functions; user and group names are resolved before, by
 * mcp_proc_resolve_user.
 */
#ifndef MCP_PROC_H
#define MCP_PROC_H

#include <stddef.h>
#include <sys/types.h>

#define MCP_PROC_MAX_GROUPS 64

/* One rlimit to set (soft and hard): resource is RLIMIT_AS, RLIMIT_CPU, ... */
typedef struct mcp_proc_limit_t {
    int           resource;
    unsigned long value;
} mcp_proc_limit_t;

typedef struct mcp_proc_spec_t {
    char *const      *argv;        /* argv[0] is the absolute path executed; NULL-terminated  */
    char *const      *envp;        /* the whole environment; NULL-terminated                  */
    const char       *directory;   /* NULL: "/"                                                */
    int               set_ids;     /* change user/group (only honoured when running as root)   */
    uid_t             uid;
    gid_t             gid;
    size_t            ngroups;     /* supplementary groups (set_ids)                           */
    gid_t             groups[MCP_PROC_MAX_GROUPS];
    const mcp_proc_limit_t *limits;
    size_t            nlimits;
    /* When non-zero: the soft RLIMIT_NOFILE the process starts with (the hard one is kept), for
     * a caller that raised its own (a supervisor holds many descriptors; a server that walks
     * every possible descriptor must not see that); a limit of RLIMIT_NOFILE in limits wins. */
    unsigned long     nofile_soft;
} mcp_proc_spec_t;

typedef struct mcp_proc_t {
    pid_t pid;                     /* also its process group id                               */
    int   in_fd;                   /* its stdin (write end; nonblocking, close-on-exec)       */
    int   out_fd;                  /* its stdout (read end; nonblocking, close-on-exec)       */
    int   err_fd;                  /* its stderr (read end; nonblocking, close-on-exec)       */
    int   ending;                  /* 0, or the ending step taken: 1 stdin closed, 2 SIGTERM
                                      sent, 3 SIGKILL sent                                    */
} mcp_proc_t;

/* Fills the ids of spec from a user name and/or a group name (either may be NULL): the user's
 * uid, primary group and supplementary groups; a group given replaces the user's groups with
 * that one. As httpd's User and Group, each may be "#<number>" (a uid without a passwd entry
 * then needs a group). Returns 0, or -1 with a sentence in err ("no user named x"). Uses getpwnam and
 * getgrnam (it may read /etc/passwd or ask NSS): call it when the configuration is read, not
 * per start. */
int mcp_proc_resolve_user(mcp_proc_spec_t *spec, const char *user, const char *group,
                          char *err, size_t errlen);

/* Starts a process. Returns 0 with *p filled, or -1 with a sentence in err, e.g. "execve
 * /usr/bin/x: No such file or directory" or "chdir /opt/x: Permission denied" (a child that
 * failed has been reaped). Waits for the child to reach execve (the close-on-exec pipe), not
 * for anything after it. */
int mcp_proc_spawn(const mcp_proc_spec_t *spec, mcp_proc_t *p, char *err, size_t errlen);

/* The first ending step: closes stdin. Returns the milliseconds until mcp_proc_end_next is due
 * (grace_ms / 2). */
long mcp_proc_end_begin(mcp_proc_t *p, long grace_ms);

/* The next step: SIGTERM to the group (returns the milliseconds until the next is due), then
 * SIGKILL to the group (returns -1: nothing more to do). */
long mcp_proc_end_next(mcp_proc_t *p, long grace_ms);

/* Non-zero when some process of p's group still exists (after its leader was reaped, a
 * descendant may hold on). */
int mcp_proc_group_alive(const mcp_proc_t *p);

/* Closes the descriptors still open (stdout, stderr; stdin when not yet closed). */
void mcp_proc_close(mcp_proc_t *p);

/* One child reaped, without waiting: its pid (and its status), 0 when no child has ended, -1
 * when there is no child at all. */
pid_t mcp_proc_reap(int *status);

/* A wait status as words: "exited with status 3", "was killed by signal 9 (Killed)". */
void mcp_proc_describe_status(int status, char *buf, size_t len);

#endif
