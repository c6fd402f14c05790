/* mcp_lines — newline framing of a byte stream with a bound on the length of a line: what the
 * stdio supervisor reads from a process's stdout (one JSON-RPC message a line, MCP's stdio
 * transport), its stderr (log lines) and its own control pipe.
 *
 * A line ends at LF; a CR just before the LF is dropped with it (a server on Windows-minded
 * runtimes writes CRLF). Bytes arrive in any split; the lines and their order do not depend on
 * it. A line that fits in one feed is handed over where it lies, without a copy; only the
 * beginning of a line cut by the end of a feed is kept, in a buffer that grows up to the bound
 * (and is given back after a line over 64 KiB).
 *
 * Two ways with a line over the bound, chosen at creation:
 *   MCP_LINES_REFUSE  the feed fails with MCP_LINES_TOO_LONG (stdout: the process is ended);
 *   MCP_LINES_CUT     its first max_line bytes are handed over, marked cut, and the rest up to
 *                     the next LF is skipped (stderr: a log line stays a log line).
 *
 * Pure code: libc only.
 */
#ifndef MCP_LINES_H
#define MCP_LINES_H

#include <stddef.h>

typedef struct mcp_lines_t mcp_lines_t;

#define MCP_LINES_REFUSE 0
#define MCP_LINES_CUT    1

#define MCP_LINES_TOO_LONG (-1)  /* a line over max_line bytes (MCP_LINES_REFUSE)  */
#define MCP_LINES_NOMEM    (-2)  /* the buffer could not grow                       */

/* Called for each complete line: len bytes at line (no LF, no CR before it), not
 * NUL-terminated, valid only during the call; cut is non-zero when it was longer and this is
 * its beginning (MCP_LINES_CUT). Return 0 to go on; another value stops the feed, which returns
 * it (so callbacks should return positive values) and drops the rest of that feed. */
typedef int mcp_lines_fn(void *baton, const char *line, size_t len, int cut);

/* max_line: the most bytes of one line, its LF and CR not counted (at least 1). NULL when out
 * of memory. */
mcp_lines_t *mcp_lines_create(size_t max_line, int mode);
void mcp_lines_destroy(mcp_lines_t *l);

/* Feeds len bytes. Returns 0, MCP_LINES_TOO_LONG, MCP_LINES_NOMEM or the callback's non-zero
 * value (a stop by the callback is meant for a caller that is ending the stream). Errors are
 * sticky: every later feed returns the same error. */
int mcp_lines_feed(mcp_lines_t *l, const char *buf, size_t len, mcp_lines_fn *fn, void *baton);

/* End of the stream: a last line without its LF is handed over (as MCP's stdio servers may end
 * with one). Returns what the callback returned, MCP_LINES_TOO_LONG (such a last line over the
 * bound, MCP_LINES_REFUSE), the sticky error, or 0. */
int mcp_lines_finish(mcp_lines_t *l, mcp_lines_fn *fn, void *baton);

/* Bytes of an unfinished line kept (what a process has made the supervisor hold). */
size_t mcp_lines_pending(const mcp_lines_t *l);

#endif
