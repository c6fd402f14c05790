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
    ("MCPBackendProtocolsTTL 1d", "MCPBackendProtocolsTTL: '1d' is not a duration (e.g. 30, 30s, 500ms, 5m)"),
    ("MCPBackendProtocolsTTL 12h", None),
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
    ('MCPBackendHeader MCP-Supervisor-Principal "x"',
     "MCPBackendHeader: MCP-Supervisor-Principal is the gateway's own header toward the "
     "backend"),
    ("MCPBackendHeaderFile Authorization /nonexistent/token",
     "MCPBackendHeaderFile Authorization: cannot open /nonexistent/token"),
    # TLS toward the backend
    ("MCPBackendCACertificateFile /etc/ssl/certs/ca-certificates.crt", None),
    ("MCPBackendCACertificateFile /nonexistent/ca.pem",
     "MCPBackendCACertificateFile: cannot read /nonexistent/ca.pem"),
    ("MCPBackendClientCertificateFile /nonexistent/client.pem",
     "MCPBackendClientCertificateFile: cannot read /nonexistent/client.pem"),
    ("MCPBackendClientCertificateFile /etc/ssl/certs/ca-certificates.crt /nonexistent/client.key",
     "MCPBackendClientCertificateFile: cannot read /nonexistent/client.key"),
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


# ---- stdio servers (docs/stdio.md): server-wide directives and <MCPStdioServer> ---------------
# {d} is the run directory; a case's error is a substring of one line of apache2 -t's output
# (inner lines' errors name their file, which is the run directory's).

STDIO_CONF = CONF.replace("<Location /mcp>\n{line}\n</Location>\n", "{line}\n")

STDIO_SERVER = """MCPStdioSupervisor /bin/true
<MCPStdioServer everything>
    Command /usr/bin/env node /opt/mcp/server.js --flag
    SetEnv NAME "a value"
    PassEnv HOME PATH
    Directory /opt/mcp
    User www-data
    Group www-data
    LimitAddressSpace 1G
    LimitCPU 600
    LimitFiles 256
    LimitProcesses 64
    StartTimeout 30
    IdleTimeout 1h
    StopGrace 5s
    MaxLine 16M
    MaxProcesses 100
    MaxProcessesPerUser 10
</MCPStdioServer>
<Location /mcp-everything>
    SetHandler mcp
    MCPBackend stdio:everything
</Location>"""


def stdio_server(*inner):
    return "MCPStdioSupervisor /bin/true\n<MCPStdioServer t>\n" + "\n".join(inner) + \
        "\n</MCPStdioServer>"


STDIO_CASES = [
    # every directive of docs/stdio.md's example
    (STDIO_SERVER, None),
    ("MCPStdioListen 127.0.0.1:0", None),
    ("MCPStdioListen [::1]:7601 http://gw.example:{port}", None),
    ("MCPStdioListen 0.0.0.0:7601 https://gw.example:7601", None),
    ("MCPStdioListen 127.0.0.1", "MCPStdioListen: '127.0.0.1' is not host:port"),
    ("MCPStdioListen 127.0.0.1:70000",
     "MCPStdioListen: '127.0.0.1:70000' is not host:port (port 0 to 65535)"),
    ("MCPStdioListen 127.0.0.1:0 ftp://gw.example",
     "MCPStdioListen: 'ftp://gw.example' is not an http:// or https:// URL (the base URL other "
     "hosts reach this supervisor at; {port} stands for its port)"),
    ("MCPStdioSecretFile /nonexistent/key", "MCPStdioSecretFile: cannot open /nonexistent/key"),
    ("MCPStdioSecretFile {d}/short.key",
     "MCPStdioSecretFile: the first line of {d}/short.key must be 16 to 1024 visible ASCII "
     "characters (no spaces)"),
    ("MCPStdioSecretFile {d}/good.key", None),
    ("MCPStdioSupervisor bin/sup", "MCPStdioSupervisor: 'bin/sup' is not an absolute path"),
    ("MCPStdioMaxProcesses 0", None),
    ("MCPStdioMaxProcesses -1",
     "MCPStdioMaxProcesses: '-1' is not a number from 0 (no limit) to 1000000"),
    ("<Location /x>\nMCPStdioListen 127.0.0.1:0\n</Location>", "MCPStdioListen not allowed in <Location> context"),
    # the section
    ("<MCPStdioServer bad/name>\nCommand /bin/cat\n</MCPStdioServer>",
     "<MCPStdioServer bad/name>: a server's name is 1 to 64 letters, digits, '-', '_' or '.'"),
    (stdio_server("SetEnv A b"), "<MCPStdioServer t>: Command is required (the program and its "
                                 "arguments)"),
    (stdio_server("Command cat -u"), "<MCPStdioServer t>, line 14 of {d}/httpd.conf: Command: "
                                     "the program 'cat' must be an absolute path"),
    (stdio_server("Command /bin/cat", "Frobnicate on"),
     "<MCPStdioServer t>, line 15 of {d}/httpd.conf: 'Frobnicate' is not a directive of "
     "<MCPStdioServer> (Command, SetEnv, PassEnv, Directory, User, Group, LimitAddressSpace, "
     "LimitCPU, LimitFiles, LimitProcesses, StartTimeout, IdleTimeout, StopGrace, MaxLine, "
     "MaxProcesses, MaxProcessesPerUser)"),
    (stdio_server("Command /bin/cat", "LimitCPU 1x"),
     "<MCPStdioServer t>, line 15 of {d}/httpd.conf: LimitCPU: '1x' is not a number of CPU "
     "seconds (e.g. 600, 10m)"),
    (stdio_server("Command /bin/cat", "MaxLine 100"),
     "line 15 of {d}/httpd.conf: MaxLine: '100' is not a size of 1K or more (e.g. 16M)"),
    (stdio_server("Command /bin/cat", "LimitAddressSpace 1T"),
     "line 15 of {d}/httpd.conf: LimitAddressSpace: '1T' is not a size in bytes (e.g. 1G, "
     "512M)"),
    (stdio_server("Command /bin/cat", "StartTimeout 0"),
     "line 15 of {d}/httpd.conf: StartTimeout: '0' is not a duration of 1 second or more "
     "(e.g. 30, 30s, 2m)"),
    (stdio_server("Command /bin/cat", "IdleTimeout 0"), None),
    (stdio_server("Command /bin/cat", "Directory tmp"),
     "line 15 of {d}/httpd.conf: Directory: 'tmp' is not an absolute path"),
    (stdio_server("Command /bin/cat", "User a b"),
     "line 15 of {d}/httpd.conf: User takes one argument"),
    (stdio_server("Command /bin/cat", "MaxProcessesPerUser many"),
     "line 15 of {d}/httpd.conf: MaxProcessesPerUser: 'many' is not a number of processes (0: "
     "no limit)"),
    (stdio_server("Command /bin/cat") + "\n" + stdio_server("Command /bin/cat"),
     "<MCPStdioServer t>: a server of that name is configured already"),
    # MCPBackend stdio:name and the supervisor program, checked once everything is read
    ("<Location /x>\nSetHandler mcp\nMCPBackend stdio:nope\n</Location>",
     "MCPBackend stdio:nope (line 14 of {d}/httpd.conf): no <MCPStdioServer nope> is "
     "configured"),
    ("<Location /x>\nMCPBackend stdio:\n</Location>",
     "MCPBackend: 'stdio:': a stdio backend is written stdio:name, the name of an "
     "<MCPStdioServer name> section"),
    (stdio_server("Command /bin/cat") + "\n<Location /x>\nMCPBackend stdio:t\n</Location>",
     None),
    (stdio_server("Command /bin/cat").replace("/bin/true", "/nonexistent/sup"),
     "MCPStdioSupervisor: /nonexistent/sup is not an executable file (No such file or "
     "directory)"),
]


@pytest.mark.parametrize("lines,error", STDIO_CASES,
                         ids=[c[0].replace("\n", " ")[:90] for c in STDIO_CASES])
def test_stdio_directive(lines, error):
    d = run_dir("mcp-config-")
    try:
        (d / "short.key").write_text("too-short\n")
        (d / "good.key").write_text("0123456789abcdef0123456789abcdef\nignored\n")
        (d / "httpd.conf").write_text(STDIO_CONF.format(d=d, module=MODULE,
                                                        line=lines.replace("{d}", str(d))))
        p = subprocess.run(["/usr/sbin/apache2", "-t", "-d", str(d), "-f", str(d / "httpd.conf")],
                           capture_output=True, text=True, timeout=30)
    finally:
        subprocess.run(["rm", "-rf", str(d)], check=False)
    if error is None:
        assert p.returncode == 0, p.stderr
        assert "Syntax OK" in p.stderr
    else:
        assert p.returncode != 0
        error = error.replace("{d}", str(d))
        assert any(error in line for line in p.stderr.splitlines()), p.stderr
