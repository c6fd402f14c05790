"""The directives' syntax and error messages, one case per setter shape and bound, checked with
`apache2 -t` on a configuration that loads the module (no server, no database): what an operator
sees when a value is out of range."""
import subprocess

import pytest

from conftest import REPO, run_dir

MODULE = REPO / "mod_mcp" / ".libs" / "mod_mcp.so"

CONF = """ServerRoot {d}
PidFile {d}/pid
ErrorLog {d}/error.log
DefaultRuntimeDir {d}
Mutex file:{d}
ServerName localhost
Listen 127.0.0.1:1
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule dbd_module /usr/lib/apache2/modules/mod_dbd.so
LoadModule mcp_module {module}
<Location /mcp>
{line}
</Location>
"""

CASES = [
    # sizes (bytes): a floor, and MCPMaxMessageSize's ceiling
    ("MCPMaxMessageSize 1073741824", None),
    ("MCPMaxMessageSize 0", "MCPMaxMessageSize: '0' is not a number >= 1"),
    ("MCPMaxMessageSize 1073741825",
     "MCPMaxMessageSize: 1073741825 is too large (at most 1073741824 bytes)"),
    ("MCPStreamQueueBytes 99999999999", None),
    ("MCPStreamQueueBytes 12k", "MCPStreamQueueBytes: '12k' is not a number >= 1"),
    # counts: at least 1 and a ceiling; limits where 0 means none
    ("MCPStreamQueueLength 1000000", None),
    ("MCPStreamQueueLength 0", "MCPStreamQueueLength: '0' is not a number >= 1"),
    ("MCPStreamQueueLength 1000001", "MCPStreamQueueLength: 1000001 is too large"),
    ("MCPMaxSessions 0", None),
    ("MCPMaxSessions 100000000", None),
    ("MCPMaxSessions 100000001", "MCPMaxSessions: 100000001 is too large"),
    ("MCPShimMaxRounds -3", "MCPShimMaxRounds: '-3' is not a number >= 0"),
    # durations, and intervals that pace a loop (10ms at least)
    ("MCPBackendTimeout 0", None),
    ("MCPStreamCloseAfter 5ms", None),
    ("MCPBackendTimeout -1", "MCPBackendTimeout: '-1' is not a duration (e.g. 30, 30s, 500ms, 5m)"),
    ("MCPRetryInterval 10ms", None),
    ("MCPRetryInterval 5ms", "MCPRetryInterval: '5ms' is too short (10ms at least)"),
    ("MCPStreamLease 0", "MCPStreamLease: '0' is too short (10ms at least)"),
    ("MCPEraBridgeToolsTTL 5m", None),
    ("MCPSessionIdleTimeout 90min", None),
    ("MCPSessionIdleTimeout 2h", None),
    ("MCPStreamLease 5x", "MCPStreamLease: '5x' is not a duration (e.g. 30, 30s, 500ms, 5m)"),
    ("MCPEraBridgeToolsTTL 0", "MCPEraBridgeToolsTTL: '0' is too short (10ms at least)"),
    # lists and flags
    ("MCPAllowedHosts a.example b.example", None),
    ("MCPAllowedOrigins self ftp://x/y",
     "MCPAllowedOrigins: 'ftp://x/y' is not self, localhost, * or an origin such as "
     "https://app.example.com (scheme://host[:port], no path)"),
    ("MCPEraBridge Off", None),
    ("MCPEraBridge maybe", "MCPEraBridge must be On or Off"),
    # headers toward the backend
    ('MCPBackendHeader X-User "%{REMOTE_USER}"', None),
    ('MCPBackendHeader "X User" "%{REMOTE_USER}"',
     "MCPBackendHeader: 'X User' is not a header name"),
    ('MCPBackendHeader mcp-session-id "x"',
     "MCPBackendHeader: Mcp-Session-Id is the gateway's own header toward the backend"),
    ('MCPBackendHeader traceparent "x"',
     "MCPBackendHeader: traceparent is the gateway's own header toward the backend"),
    ("MCPBackendHeaderFile Authorization /nonexistent/token",
     "MCPBackendHeaderFile Authorization: cannot open /nonexistent/token"),
]


@pytest.mark.parametrize("line,error", CASES, ids=[c[0] for c in CASES])
def test_directive(line, error):
    d = run_dir("mcp-config-")
    try:
        (d / "httpd.conf").write_text(CONF.format(d=d, module=MODULE, line=line))
        p = subprocess.run(["/usr/sbin/apache2", "-t", "-d", str(d), "-f", str(d / "httpd.conf")],
                           capture_output=True, text=True, timeout=30)
    finally:
        subprocess.run(["rm", "-rf", str(d)], check=False)
    if error is None:
        assert p.returncode == 0, p.stderr
        assert "Syntax OK" in p.stderr
    else:
        assert p.returncode != 0
        assert error in p.stderr.splitlines(), p.stderr
