#!/usr/bin/python3
"""A tiny OAuth 2.0 authorization server for the tests (never for production).

It makes an RSA key at start, publishes it as a JWKS, and mints RS256 JWT access tokens with the
client-credentials grant (RFC 6749 4.4) for the resource the client names (RFC 8707 `resource`,
which becomes the token's `aud`); `sub` is the client id.

  GET  /.well-known/oauth-authorization-server   metadata (RFC 8414)
  GET  /jwks                                     the public key
  POST /token   grant_type=client_credentials&client_id=ID&client_secret=ID-secret
                &resource=URL[&scope=...][&lifetime=SECONDS]   (lifetime: test-only, may be < 0)

Usage: tests/oauth_as.py --portfile FILE --certfile PEM
It serves HTTPS (mod_auth_openidc fetches a JWKS over https only) with a self-signed
certificate for 127.0.0.1 made at start and written to PEM (clients trust it from there), on a
free loopback port written to FILE once it listens.
"""

import argparse
import datetime
import ipaddress
import json
import os
import ssl
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

KID = "test-key-1"


class Handler(BaseHTTPRequestHandler):
    server_version = "mcp-test-as/1"

    def log_message(self, fmt, *args):
        pass

    def _json(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        srv = self.server
        if self.path == "/.well-known/oauth-authorization-server":
            self._json(200, {"issuer": srv.issuer, "token_endpoint": srv.issuer + "/token",
                             "jwks_uri": srv.issuer + "/jwks",
                             "grant_types_supported": ["client_credentials"],
                             "token_endpoint_auth_methods_supported": ["client_secret_post"]})
        elif self.path == "/jwks":
            self._json(200, {"keys": [srv.jwk]})
        else:
            self._json(404, {"error": "not_found"})

    def do_POST(self):
        srv = self.server
        if self.path != "/token":
            self._json(404, {"error": "not_found"})
            return
        n = int(self.headers.get("Content-Length") or 0)
        form = dict(urllib.parse.parse_qsl(self.rfile.read(n).decode()))
        client = form.get("client_id", "")
        if form.get("grant_type") != "client_credentials":
            self._json(400, {"error": "unsupported_grant_type"})
            return
        if not client or form.get("client_secret") != client + "-secret":
            self._json(401, {"error": "invalid_client"})
            return
        if not form.get("resource"):
            self._json(400, {"error": "invalid_target"})
            return
        lifetime = int(form.get("lifetime", "300"))
        now = int(time.time())
        claims = {"iss": srv.issuer, "sub": client, "client_id": client, "aud": form["resource"],
                  "iat": now - (600 if lifetime < 0 else 0), "exp": now + lifetime,
                  "scope": form.get("scope", "")}
        token = jwt.encode(claims, srv.key, algorithm="RS256", headers={"kid": KID})
        self._json(200, {"access_token": token, "token_type": "Bearer",
                         "expires_in": lifetime, "scope": claims["scope"]})


def self_signed(certfile):
    """A throw-away key and certificate for 127.0.0.1, both in certfile (PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    with open(certfile, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--portfile", required=True)
    ap.add_argument("--certfile", required=True)
    args = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self_signed(args.certfile)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.certfile)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(srv.key.public_key()))
    jwk.pop("key_ops", None)
    jwk.update({"kid": KID, "use": "sig", "alg": "RS256"})
    srv.jwk = jwk
    port = srv.server_address[1]
    srv.issuer = f"https://127.0.0.1:{port}"
    tmp = args.portfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.rename(tmp, args.portfile)
    srv.serve_forever()


if __name__ == "__main__":
    main()
