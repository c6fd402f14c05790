"""Smoke test of the test stack itself: every httpd answers and the schema is loaded."""

import requests


def test_stack_is_up(stack, pg):
    urls = stack["MCP_URLS"].split() + stack["MCP_AUTH_URLS"].split()
    assert len(stack["MCP_URLS"].split()) == int(stack["MCP_HTTPD_COUNT"])
    for url in urls:
        r = requests.get(url, timeout=10)   # any HTTP status will do: the server answered
        assert r.status_code > 0, url
    with pg.cursor() as cur:
        cur.execute("SELECT to_regclass('mcp.sessions') IS NOT NULL")
        assert cur.fetchone()[0], "table mcp.sessions is missing"
