"""TLS toward an https backend (README, MCPBackendCACertificateFile and
MCPBackendClientCertificateFile): the backend's certificate verified against the CA named, and the
gateway's client certificate presented to a backend that requires one.

The backend: the C test backend behind httpd's own mod_ssl and mod_proxy on a port of the stack's
httpd (SSLVerifyClient require; the CN of the client certificate passed on as X-Client-CN, which
the test backend's session_info reports). The CA, the backend's certificate and the client
certificate are made here with openssl.
"""
from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import own_stack, run_dir
from mcp_client import McpError, McpSession


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _certificates(d: Path) -> dict[str, Path]:
    """A CA, the backend's certificate (127.0.0.1) and the gateway's client certificate (CN
    gateway-one), each key beside it; readable by httpd's children (test keys, nothing else)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-days", "1", "-keyout", str(d / "ca.key"),
             "-out", str(d / "ca.pem"), "-subj", "/CN=mod_mcp backend TLS test CA")
    ext = d / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    for name, cn, extra in (("server", "127.0.0.1", ["-extfile", str(ext)]),
                            ("client", "gateway-one", [])):
        _openssl("req", *ec, "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"),
                 "-subj", f"/CN={cn}")
        _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.pem"),
                 "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "1",
                 "-out", str(d / f"{name}.pem"), *extra)
    files = {n: d / n for n in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}
    files["combined.pem"] = d / "combined.pem"
    files["combined.pem"].write_text(files["client.pem"].read_text()
                                     + files["client.key"].read_text())
    for f in files.values():
        f.chmod(0o644)
    return files


@pytest.fixture(scope="module")
def mtls():
    d = run_dir("mcp-backend-tls.")
    port = _free_port()
    c = _certificates(d)
    conf = d / "mtls.conf"
    conf.write_text(f"""
<IfModule !ssl_module>
    LoadModule ssl_module /usr/lib/apache2/modules/mod_ssl.so
</IfModule>
<IfModule !proxy_module>
    LoadModule proxy_module /usr/lib/apache2/modules/mod_proxy.so
</IfModule>
<IfModule !proxy_http_module>
    LoadModule proxy_http_module /usr/lib/apache2/modules/mod_proxy_http.so
</IfModule>
<IfModule !headers_module>
    LoadModule headers_module /usr/lib/apache2/modules/mod_headers.so
</IfModule>
# The backend: the test backend behind mod_ssl, which requires a client certificate of the CA.
Listen 127.0.0.1:{port}
<VirtualHost 127.0.0.1:{port}>
    SSLEngine on
    SSLCertificateFile "{c['server.pem']}"
    SSLCertificateKeyFile "{c['server.key']}"
    SSLCACertificateFile "{c['ca.pem']}"
    SSLVerifyClient require
    SSLVerifyDepth 1
    # No idle keep-alive connection (the gateway's, from this same httpd) when the stack stops:
    # an event MPM child stopped with one leaks its allocator (httpd's, not mod_mcp's).
    KeepAlive Off
    RequestHeader set X-Client-CN "%{{SSL_CLIENT_S_DN_CN}}s"
    ProxyPass /mcp ${{MCP_BACKEND_URL}} flushpackets=on
</VirtualHost>
# (A generous connect timeout: the TLS handshake is made with this same httpd, slow under ASan.)
MCPBackendConnectTimeout 30
<Location /mcp-mtls>
    SetHandler mcp
    MCPBackend https://127.0.0.1:{port}/mcp
    MCPBackendCACertificateFile "{c['ca.pem']}"
    MCPBackendClientCertificateFile "{c['client.pem']}" "{c['client.key']}"
</Location>
# A nested section keeps the CA it inherits and names its own certificate (key in the file).
<Location /mcp-mtls/combined>
    MCPBackendClientCertificateFile "{c['combined.pem']}"
</Location>
<Location /mcp-mtls-nocert>
    SetHandler mcp
    MCPBackend https://127.0.0.1:{port}/mcp
    MCPBackendCACertificateFile "{c['ca.pem']}"
</Location>
<Location /mcp-mtls-noca>
    SetHandler mcp
    MCPBackend https://127.0.0.1:{port}/mcp
    MCPBackendClientCertificateFile "{c['client.pem']}" "{c['client.key']}"
</Location>
""")
    with own_stack(d, "--conf", str(conf)) as env:
        env["BASE"] = env["MCP_HTTP_URLS"].split()[0].rsplit("/", 1)[0]
        yield env


def _info(s: McpSession) -> dict:
    result = s.call("tools/call", {"name": "session_info", "arguments": {}})
    return json.loads(result["content"][0]["text"])


def test_the_client_certificate_reaches_an_mtls_backend(mtls):
    for path in ("/mcp-mtls", "/mcp-mtls/combined"):
        with McpSession(mtls["BASE"] + path) as s:
            s.initialize()
            headers = {k.lower(): v for k, v in (_info(s)["headers"] or {}).items()}
            assert headers.get("x-client-cn") == "gateway-one", headers
            events = [e.json for e in s.request_stream("tools/call", {
                "name": "slow", "arguments": {"count": 2, "interval_ms": 50},
                "_meta": {"progressToken": "t"}}) if e.json]
            assert [m.get("method") for m in events][:2] == ["notifications/progress"] * 2
            assert events[-1]["result"]["content"][0]["text"] == "slow done: 2 steps"


def test_without_a_certificate_or_the_ca_the_backend_is_refused_precisely(mtls):
    for path, words in (("/mcp-mtls-nocert", "certificate required"),
                        ("/mcp-mtls-noca", "SSL certificate problem")):
        with McpSession(mtls["BASE"] + path) as s:
            with pytest.raises(McpError) as e:
                s.initialize()
            assert e.value.response.status_code in (502, 504), e.value.response.text
            assert words in e.value.response.json()["error"]["message"], e.value.response.text
