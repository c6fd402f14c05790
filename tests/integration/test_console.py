"""The operator's console (SetHandler mcp-console, issue 26) driven in a real headless browser:
Debian's Chromium and chromedriver through python3-selenium (scripts/deps installs them; the
tests fail, never skip, without them).

One browser serves the whole module. The module's own MCP sessions (made once, by `made`) are
what the pages are checked against: a call with progress, a hostile echo, a tool error; they are
closed before any page is read. Every page read (HTML from the browser or through requests, JSON)
is kept in READ, and the last test checks that none of them holds a full session id.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from dataclasses import dataclass, field
from http.client import HTTPConnection
from typing import Any, Callable
from urllib.parse import urlencode, urlsplit, parse_qs

import pytest
import requests

from conftest import database
from mcp_client import McpSession
from waiting import wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

# What the stylesheet (?asset=console.css) makes of the header: #1d2b44. A browser's own is
# transparent, rgba(0, 0, 0, 0).
HEADER_BACKGROUND = "rgba(29, 43, 68, 1)"

# Every page read in this module (HTML source or JSON text), for the session id check.
READ: list[str] = []

# The hostile text echoed: markup that would run if it were not escaped, a </details> that
# would break out of its fold, a NUL (\u0000 in JSON). The test backend (C) echoes a string up to
# its NUL, so what comes back is the part before it (a </details> is on both sides).
HOSTILE = ("<script>document.title='pwned'</script>"
           "<img src=x onerror=\"document.title='pwned'\"></details>\u0000</details>tail")


# ---- the browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium module (python3-selenium)")
    if missing:
        pytest.fail("the console's browser tests need Debian's chromium, chromium-driver and "
                    f"python3-selenium; missing: {', '.join(missing)}. Run scripts/deps.",
                    pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def by():
    from selenium.webdriver.common.by import By
    return By


def load(driver, url: str) -> None:
    """Navigates and keeps the page's source for the session id check."""
    driver.get(url)
    READ.append(driver.page_source)


def console_problems(driver, expected_failures: tuple[str, ...] = ()) -> list[dict]:
    """The browser's console entries since the last call that are errors or CSP reports.

    Not counted: Chromium's own request for /favicon.ico at the server's root (outside the
    console, which has no icon: a data: icon would break img-src 'self'), and the network
    errors of the URLs in expected_failures (pages loaded on purpose for their 4xx)."""
    problems = []
    for entry in driver.get_log("browser"):
        message = entry.get("message", "")
        if entry.get("source") == "network" and (
                re.match(r"https?://[^/]+/favicon\.ico - ", message)
                or any(message.startswith(u + " - ") for u in expected_failures)):
            continue
        if entry.get("level") in ("SEVERE", "ERROR") or "Content Security Policy" in message \
                or "Refused to" in message:
            problems.append(entry)
    return problems


def open_fold(details) -> None:
    """Clicks a <details>' <summary> (its .m part when it has one: an entry's summary line
    also holds a link, which a click on its middle could follow)."""
    By = by()
    summary = details.find_element(By.CSS_SELECTOR, ":scope > summary")
    (summary.find_elements(By.CSS_SELECTOR, ":scope > span.m") or [summary])[0].click()
    assert details.get_attribute("open") is not None


def expand(element) -> None:
    """Opens every fold (<details>) in element, outermost first, by clicking its <summary>."""
    By = by()
    for _ in range(50):
        closed = [d for d in element.find_elements(By.CSS_SELECTOR,
                                                   ":scope details:not([open])")
                  if d.is_displayed()]
        if element.tag_name == "details" and element.get_attribute("open") is None:
            closed = [element]
        if not closed:
            return
        open_fold(closed[0])
    raise AssertionError("folds kept closing")


# ---- HTTP ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http():
    s = requests.Session()
    s.trust_env = False
    try:
        yield s
    finally:
        s.close()


def console_url(stack, instance: int = 0) -> str:
    urls = stack.get("MCP_CONSOLE_URLS", "").split()
    assert urls, "stack.env has no MCP_CONSOLE_URLS: a tests/stack without the console?"
    return urls[instance]


def url_of(base: str, **params) -> str:
    return base + ("?" + urlencode(params) if params else "")


def security_problems(r) -> list[str]:
    """What is missing of the headers the console sends with every answer (README "The
    console"): the policy (no script), nosniff, no referrer."""
    csp = r.headers.get("Content-Security-Policy", "")
    problems = []
    if not csp.startswith("default-src 'none';") or "script-src" in csp or "unsafe" in csp:
        problems.append(f"Content-Security-Policy {csp!r}")
    if r.headers.get("X-Content-Type-Options") != "nosniff":
        problems.append(f"X-Content-Type-Options {r.headers.get('X-Content-Type-Options')!r}")
    if r.headers.get("Referrer-Policy") != "no-referrer":
        problems.append(f"Referrer-Policy {r.headers.get('Referrer-Policy')!r}")
    return problems


def assert_security_headers(r, cache: str = "no-store") -> None:
    """The security headers, and Cache-Control (no-store for pages and refusals; the
    stylesheet may be kept)."""
    what = (getattr(r, "url", None), r.status_code, dict(r.headers))
    assert security_problems(r) == [], what
    assert r.headers.get("Cache-Control") == cache, what


@dataclass
class Raw:
    status_code: int
    headers: Any
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def raw_get(url: str, method: str = "GET", body: bytes | None = None) -> Raw:
    """A request with its target exactly as given (requests would re-quote a broken %-escape)."""
    u = urlsplit(url)
    conn = HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request(method, u.path + ("?" + u.query if u.query else ""), body=body)
        r = conn.getresponse()
        raw = Raw(r.status, r.headers, r.read().decode("utf-8", "replace"))
    finally:
        conn.close()
    READ.append(raw.text)
    return raw


def get_json(http, base: str, **params) -> dict:
    r = http.get(url_of(base, format="json", **params), timeout=30)
    READ.append(r.text)
    assert r.status_code == 200, (r.url, r.status_code, r.text[:500])
    assert r.headers["Content-Type"] == "application/json"
    assert_security_headers(r)
    return r.json()


def get_html(http, base: str, **params) -> str:
    r = http.get(url_of(base, **params), timeout=30)
    READ.append(r.text)
    assert r.status_code == 200, (r.url, r.status_code, r.text[:500])
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    assert_security_headers(r)
    return r.text


def without(doc: dict, *keys: str) -> dict:
    return {k: v for k, v in doc.items() if k not in keys}


def settled(doc: dict) -> dict:
    """A page's document without what moves with the clock alone (its time, the start of its
    window, the tools page's spans) and this host's counters."""
    doc = without(doc, "generated_at", "host")
    if isinstance(doc.get("sample"), dict):
        doc["sample"] = without(doc["sample"], "since")
    if isinstance(doc.get("timeline"), list):
        doc["timeline"] = [without(b, "from") for b in doc["timeline"]]
    return doc


def agreeing(http, driver, base: str, read_html: Callable[[Any], Any], **params):
    """(JSON document, what read_html(driver) found in the page) for a page whose JSON form
    read just before and just after the browser's load was the same (apart from generated_at):
    a page read while the data changed under it is read again."""
    url = url_of(base, **params)

    def attempt():
        before = get_json(http, base, **params)
        load(driver, url)
        seen = read_html(driver)
        after = get_json(http, base, **params)
        if settled(before) == settled(after):
            return before, seen
        return None

    return wait_for(attempt, timeout=10, what=f"a quiet moment to read {url}")


# ---- what the pages show, as the HTML renders it from a document ------------------------------


def when(t: str | None, digits: int = 19) -> str:
    """mcp_console.c's cut_time: PostgreSQL's UTC timestamp cut to the second (19) or the
    millisecond (23), with a space for the T."""
    if t is None:
        return "-"
    s = t[:min(t.find("+") if "+" in t else len(t), digits)]
    return s[:10] + " " + s[11:] if len(s) >= 19 and s[10] == "T" else s


def summary_of(kind: str | None, text: str | None) -> tuple[str, bool]:
    """What the transcript says a message is ("tools/call #3", "result #3", "priming event"),
    and whether it is an error."""
    if kind == "priming":
        return "priming event", False
    m = json.loads(text)
    if not isinstance(m, dict):
        return ("batch" if isinstance(m, list) else "not a JSON-RPC message"), False
    rid = f" #{json.dumps(m['id'])}" if m.get("id") is not None else ""
    if isinstance(m.get("method"), str):
        return m["method"] + rid, False
    if m.get("error") is not None:
        return f"error {m['error'].get('code', '?')}{rid}", True
    if m.get("result") is not None:
        if isinstance(m["result"], dict) and m["result"].get("isError") is True:
            return f"result (tool error){rid}", True
        return f"result{rid}", False
    return "message", False


# ---- the module's own sessions ----------------------------------------------------------------


@dataclass
class Made:
    sid: str                    # the session's id (never to appear in a page)
    tag: str                    # left(md5(id), 8)
    ref: str                    # left(md5(id), 16): the link's handle
    client: str
    version: str
    run: str
    other_sid: str              # a second session, same run
    other_client: str
    slow_rid: int = 0
    slow_events: list = field(default_factory=list)     # the SSE events the client received
    hostile_rid: int = 0
    hostile_back: str = ""      # what echo returned
    plain_rid: int = 0
    fail_rid: int = 0
    calls: dict = field(default_factory=dict)           # tool -> calls made


@pytest.fixture(scope="module")
def made(stack) -> Made:
    url = stack["MCP_URLS"].split()[0]
    run = "r" + uuid.uuid4().hex[:9]        # not all hex: a search for it is not a tag search
    client = f"console-probe-{run}"
    version = "<i>1</i> & \"2\""
    with McpSession(url) as s, McpSession(url) as other:
        s.initialize(client_info={"name": client, "version": version})
        other.initialize(client_info={"name": f"console-other-{run}", "version": "2"})
        m = Made(sid=s.session_id, tag=hashlib.md5(s.session_id.encode()).hexdigest()[:8],
                 ref=hashlib.md5(s.session_id.encode()).hexdigest()[:16], client=client,
                 version=version, run=run, other_sid=other.session_id,
                 other_client=f"console-other-{run}")
        # A call with progress: the request, the priming event, 3 progress notifications, the
        # result (read to its end: the streamed response is closed).
        m.slow_events = list(s.request_stream(
            "tools/call", {"name": "slow", "arguments": {"count": 3, "interval_ms": 20},
                           "_meta": {"progressToken": f"p-{run}"}}, include_empty=True))
        m.slow_rid = s.last_request_id
        assert [e.json and e.json.get("method") for e in m.slow_events[:-1]] == \
            [None] + ["notifications/progress"] * 3, m.slow_events
        assert m.slow_events[-1].json["result"]["content"][0]["text"] == "slow done: 3 steps"
        back = s.call("tools/call", {"name": "echo", "arguments": {"text": HOSTILE}})
        m.hostile_rid = s.last_request_id
        m.hostile_back = back["content"][0]["text"]
        assert m.hostile_back and HOSTILE.startswith(m.hostile_back), back
        assert s.call("tools/call", {"name": "echo", "arguments": {"text": "plain"}}) \
            ["content"][0]["text"] == "plain"
        m.plain_rid = s.last_request_id
        assert s.call("tools/call", {"name": "fail", "arguments": {}})["isError"] is True
        m.fail_rid = s.last_request_id
        other.call("tools/call", {"name": "echo", "arguments": {"text": "other"}})
        m.calls = {"slow": 1, "echo": 3, "fail": 1}
    # Every answer stored (the store may commit a moment after the client has it).
    with database(stack) as conn:
        def stored():
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM mcp.events WHERE session_id = %s "
                            "AND direction = 'out' AND stream_id IS NOT NULL "
                            "AND (message ? 'result' OR message ? 'error')", (m.sid,))
                return cur.fetchone()[0] == 4
        wait_for(stored, what="the four calls' answers in mcp.events")
    return m


def event_rows(stack, sid: str, stream: int | None = None) -> list[tuple]:
    """(id, direction, kind, stream_id, seq, message_text) of a session's (or one stream's)
    events, in order."""
    with database(stack) as conn, conn.cursor() as cur:
        if stream is None:
            cur.execute("SELECT id, direction, kind, stream_id, seq, message_text FROM mcp.events"
                        " WHERE session_id = %s ORDER BY id", (sid,))
        else:
            cur.execute("SELECT id, direction, kind, stream_id, seq, message_text FROM mcp.events"
                        " WHERE stream_id = %s ORDER BY seq", (stream,))
        return cur.fetchall()


def transcript_items(driver) -> list:
    By = by()
    return driver.find_elements(
        By.XPATH, "//h2[.='Transcript']/following-sibling::ul[@class='events'][1]/li")


def read_event_item(li) -> dict:
    """One transcript or stream entry as the page shows it (its summary line)."""
    By = by()
    spans = li.find_elements(By.CSS_SELECTOR, ":scope > details > summary > span")
    item = {"class": li.get_attribute("class"), "time": spans[0].text, "dir": spans[1].text,
            "summary": spans[2].text, "stream": None, "event_id": None, "bytes": None,
            "offset": None}
    for sp in spans[3:]:
        t = sp.text
        if t.startswith("stream "):
            item["stream"] = sp.find_element(By.TAG_NAME, "a").text
        elif t.startswith("event "):
            item["event_id"] = t[len("event "):]
        elif t.endswith(" bytes"):
            item["bytes"] = int(t[:-len(" bytes")])
        elif t.startswith("+") and t.endswith(" ms"):
            item["offset"] = t
        else:
            raise AssertionError(f"an unknown part of an entry's summary: {t!r}")
    return item


def expected_item(e: dict, with_stream: bool = True) -> dict:
    """What the page should show for an event of a page's JSON document."""
    summary, err = summary_of(e["kind"], e["text"])
    return {"class": e["direction"] + (" err" if err else ""), "time": when(e["time"], 23),
            "dir": "→ from the client" if e["direction"] == "in" else "← to the client",
            "summary": summary,
            "stream": str(e["stream"]) if with_stream and e.get("stream") is not None else None,
            "event_id": e["event_id"],
            "bytes": e["bytes"] if e["text"] is not None else None,
            "offset": f"+{e['offset_ms']:.1f} ms" if "offset_ms" in e else None}


# ---- 1. the overview -------------------------------------------------------------------------


def test_overview_in_the_browser(stack, browser, http, made):
    By = by()
    base = console_url(stack)

    def read(driver):
        cards = [(c.find_element(By.CSS_SELECTOR, ".k").text,
                  int(c.find_element(By.CSS_SELECTOR, ".v").text))
                 for c in driver.find_elements(By.CSS_SELECTOR, ".cards .card")]
        svg = driver.find_element(
            By.XPATH, "//h2[.='Calls per minute']/following-sibling::figure[1]/*[local-name()="
                      "'svg']")
        columns = [r.get_attribute("textContent")
                   for r in svg.find_elements(By.CSS_SELECTOR, "rect")]
        return cards, svg.get_attribute("aria-label"), columns

    doc, (cards, label, columns) = agreeing(http, browser, base, read)
    assert browser.title == "Overview · mod_mcp console"
    assert browser.find_element(By.TAG_NAME, "h1").text == "Overview"
    assert doc["page"] == "overview"
    assert cards == [
        ("live sessions (every host)", doc["sessions"]["live"]),
        ("sessions started in the last hour", doc["sessions"]["started_last_hour"]),
        ("open request streams", doc["streams"]["request"]),
        ("open standalone streams", doc["streams"]["standalone"]),
        ("followers (resumptions)", doc["streams"]["followers"]),
        ("parked streams (this host)", doc["host"]["parked"]),
    ]
    # This module's two sessions started within the hour, and are live.
    assert doc["sessions"]["started_last_hour"] >= 2 and doc["sessions"]["live"] >= 2
    # The calls-per-minute plot: an SVG, one column per minute with calls, its tooltip the
    # minute's count; the module's own calls are in it.
    assert label == "Requests started per minute, the last 15 minutes (every host)"
    busy = [mn for mn in doc["calls_per_minute"] if mn["calls"] > 0]
    assert len(doc["calls_per_minute"]) == 15 and len(busy) >= 1
    assert columns == [f"{when(mn['minute'])[11:]} UTC: {mn['calls']} calls (calls)"
                       for mn in busy]
    assert sum(mn["calls"] for mn in busy) >= 5
    # The stylesheet is applied (the policy lets it in: style-src 'self').
    header = browser.find_element(By.TAG_NAME, "header")
    assert header.value_of_css_property("background-color") == HEADER_BACKGROUND
    css = http.get(url_of(base, asset="console.css"), timeout=30)
    assert css.status_code == 200 and css.headers["Content-Type"] == "text/css; charset=utf-8"
    assert_security_headers(css, cache="max-age=3600")
    assert "header{background:#1d2b44" in css.text
    # The header's JSON link is the page's JSON form.
    link = browser.find_element(By.LINK_TEXT, "JSON").get_attribute("href")
    assert parse_qs(urlsplit(link).query) == {"page": ["overview"], "format": ["json"]}
    assert http.get(link, timeout=30).json()["page"] == "overview"
    # Nothing refused by the policy, no error in the browser's console.
    assert console_problems(browser) == []


# ---- 2. the sessions list --------------------------------------------------------------------


def session_rows(driver) -> list[dict]:
    By = by()
    rows = []
    for tr in driver.find_elements(By.CSS_SELECTOR, "main table tr")[1:]:
        tds = tr.find_elements(By.TAG_NAME, "td")
        a = tds[0].find_element(By.TAG_NAME, "a")
        rows.append({"tag": a.text, "href": a.get_attribute("href"),
                     "cells": [td.text for td in tds[1:]]})
    return rows


def test_the_session_is_listed_and_links_to_its_transcript(stack, browser, http, made):
    By = by()
    base = console_url(stack)
    # From the overview, by the header's link.
    load(browser, base)
    browser.find_element(By.LINK_TEXT, "Sessions").click()
    assert browser.title == "Sessions · mod_mcp console"
    assert parse_qs(urlsplit(browser.current_url).query) == {"page": ["sessions"]}
    # Searched by the client's name (a part of it, any case): this session only.
    load(browser, url_of(base, page="sessions", q=made.client.upper()))
    rows = session_rows(browser)
    assert [r["tag"] for r in rows] == [made.tag], rows
    assert rows[0]["cells"][1] == f"{made.client} {made.version}"
    # No element made of the client's version (<i>1</i>): it is text.
    assert browser.find_elements(By.TAG_NAME, "i") == []
    # Searched by its tag, through the page's form (a GET form, allowed by form-action 'self').
    box = browser.find_element(By.CSS_SELECTOR, "form.search input[name=q]")
    box.clear()
    box.send_keys(made.tag)
    browser.find_element(By.CSS_SELECTOR, "form.search button[type=submit]").click()
    wait_for(lambda: parse_qs(urlsplit(browser.current_url).query).get("q") == [made.tag],
             what="the search form's answer")
    READ.append(browser.page_source)
    assert browser.find_element(By.CSS_SELECTOR, "form.search input[name=q]") \
        .get_attribute("value") == made.tag
    rows = session_rows(browser)
    assert [r["tag"] for r in rows] == [made.tag], rows
    # By the run (a part of both sessions' client names): both, newest first.
    load(browser, url_of(base, page="sessions", q=made.run))
    assert {r["tag"] for r in session_rows(browser)} == {
        made.tag, hashlib.md5(made.other_sid.encode()).hexdigest()[:8]}
    # Its row links to its transcript.
    load(browser, url_of(base, page="sessions", q=made.tag))
    browser.find_element(By.LINK_TEXT, made.tag).click()
    assert parse_qs(urlsplit(browser.current_url).query) == {"page": ["session"],
                                                             "s": [made.ref]}
    READ.append(browser.page_source)
    assert browser.title == f"Session {made.ref} · mod_mcp console"
    facts = dict(zip([dt.text for dt in browser.find_elements(By.CSS_SELECTOR, "dl.facts dt")],
                     [dd.text for dd in browser.find_elements(By.CSS_SELECTOR, "dl.facts dd")]))
    assert facts["Tag"] == made.tag
    assert facts["Client"] == f"{made.client} {made.version}"
    assert facts["State"] == "live"
    assert facts["Streams"].startswith("4 request, 0 standalone; 0 open")
    assert int(facts["Messages stored"]) == len(event_rows(stack, made.sid))
    assert len(transcript_items(browser)) == len(event_rows(stack, made.sid))
    assert console_problems(browser) == []


# ---- 3. a call with progress, message by message ------------------------------------------------


def test_the_transcript_shows_every_message_of_a_call_with_progress(stack, browser, made):
    By = by()
    base = console_url(stack)
    load(browser, url_of(base, page="session", s=made.ref))
    items = [read_event_item(li) for li in transcript_items(browser)]
    rows = event_rows(stack, made.sid)
    # Every row of mcp.events of the session, in order: same count, same messages.
    assert len(items) == len(rows), (items, rows)
    for item, (eid, direction, kind, stream, seq, text) in zip(items, rows):
        summary, err = summary_of(kind, text)
        assert (item["class"], item["summary"]) == (direction + (" err" if err else ""),
                                                     summary), (item, eid)
        assert item["stream"] == (str(stream) if stream is not None else None), (item, eid)
        assert item["event_id"] == (f"{stream}-{seq}" if stream is not None and
                                    direction == "out" else None), (item, eid)
        assert item["bytes"] == (len(text.encode()) if text is not None else None), (item, eid)
    # The call with progress: its request, the priming event, each progress notification and
    # the result, in this order, as the client received them.
    rid = json.dumps(made.slow_rid)
    slow = [i for i in items if i["summary"] == f"tools/call #{rid}"]
    assert len(slow) == 1, items
    stream = slow[0]["stream"]
    of_call = [i for i in items if i["stream"] == stream]
    assert [i["summary"] for i in of_call] == [f"tools/call #{rid}", "priming event"] + \
        ["notifications/progress"] * 3 + [f"result #{rid}"]
    assert [i["event_id"] for i in of_call[1:]] == [e.id for e in made.slow_events]
    assert [i["dir"] for i in of_call] == ["→ from the client"] + ["← to the client"] * 5
    # The transcript's fold of each message is the message the client got.
    lis = [li for li, i in zip(transcript_items(browser), items) if i["stream"] == stream]
    for li, ev in zip(lis[2:], made.slow_events[1:]):
        expand(li)
        body = li.find_element(By.CSS_SELECTOR, ".json").text
        if ev.json.get("method"):
            assert ev.json["params"]["message"] in body, body
        else:
            assert '"slow done: 3 steps"' in body, body
    # The stream link leads to the stream's page: one mark on its timeline per message.
    lis[0].find_element(By.LINK_TEXT, stream).click()
    assert parse_qs(urlsplit(browser.current_url).query) == {"page": ["stream"],
                                                             "id": [stream]}
    READ.append(browser.page_source)
    assert browser.title == f"Stream {stream} · mod_mcp console"
    stream_rows = event_rows(stack, made.sid, int(stream))
    assert len(stream_rows) == 6
    svg = browser.find_element(
        By.XPATH, "//h2[.='Timeline']/following-sibling::figure[1]/*[local-name()='svg']")
    marks = svg.find_elements(By.CSS_SELECTOR, "circle")
    assert len(marks) == len(stream_rows)
    assert [m.get_attribute("class") for m in marks] == \
        ["m-in", "m-priming"] + ["m-notification"] * 3 + ["m-result"]
    tips = [m.get_attribute("textContent") for m in marks]
    assert [int(re.match(r"seq (\d+) at \+", t).group(1)) for t in tips] == \
        [r[4] for r in stream_rows], tips
    xs = [float(m.get_attribute("cx")) for m in marks]
    assert xs == sorted(xs) and xs[0] < xs[-1], xs
    entries = browser.find_elements(By.CSS_SELECTOR, "main > ul.events > li")
    assert len(entries) == len(stream_rows)
    facts = dict(zip([dt.text for dt in browser.find_elements(By.CSS_SELECTOR, "dl.facts dt")],
                     [dd.text for dd in browser.find_elements(By.CSS_SELECTOR, "dl.facts dd")]))
    assert facts["Method"] == "tools/call" and facts["Status"] == "complete", facts
    assert facts["Messages stored"] == "6" and facts["Session"] == made.tag
    assert console_problems(browser) == []


# ---- 4. a hostile message renders as text --------------------------------------------------------


def test_a_hostile_message_renders_as_text_and_runs_nothing(stack, browser, http, made):
    By = by()
    base = console_url(stack)
    load(browser, url_of(base, page="session", s=made.ref))
    title = f"Session {made.ref} · mod_mcp console"
    assert browser.title == title
    rid = json.dumps(made.hostile_rid)
    lis = {read_event_item(li)["summary"]: li for li in transcript_items(browser)}
    request, result = lis[f"tools/call #{rid}"], lis[f"result #{rid}"]
    # As JSON writes the strings (json-c and Python agree on these characters: \" and \u0000).
    sent, back = json.dumps(HOSTILE), json.dumps(made.hostile_back)
    assert "\\u0000" in sent and "</details>" in back
    for li, shown in ((request, sent), (result, back)):
        assert shown not in li.text          # folded until opened
        open_fold(li.find_element(By.CSS_SELECTOR, ":scope > details"))
        expand(li)
        assert shown in li.text, li.text     # the literal text, visible
        assert shown in browser.find_element(By.TAG_NAME, "body").text
    # Nothing ran and nothing was made of the markup.
    assert browser.title == title
    assert browser.find_elements(By.TAG_NAME, "script") == []
    assert browser.find_elements(By.TAG_NAME, "img") == []
    assert browser.find_elements(By.CSS_SELECTOR, "[onerror]") == []
    # The </details> in the text closed no fold: every entry is still one <li> of the list.
    assert len(transcript_items(browser)) == len(event_rows(stack, made.sid))
    assert console_problems(browser) == []
    # The JSON form carries the exact texts.
    doc = get_json(http, base, page="session", s=made.ref)
    texts = {summary_of(e["kind"], e["text"])[0]: e["text"] for e in doc["events"]}
    assert json.loads(texts[f"tools/call #{rid}"])["params"]["arguments"]["text"] == HOSTILE
    assert json.loads(texts[f"result #{rid}"])["result"]["content"][0]["text"] == \
        made.hostile_back
    rows = {r[5] for r in event_rows(stack, made.sid) if r[5]}
    assert texts[f"tools/call #{rid}"] in rows and texts[f"result #{rid}"] in rows
    # A parameter's name is reflected in the error page as text too.
    evil = "<img src=x onerror=document.title=1>"        # a name is quoted up to 40 bytes
    bad = url_of(base, **{evil: "1"})
    load(browser, bad)
    assert browser.title == "Error 400 · mod_mcp console"
    assert f"{evil}: the overview page takes no such parameter" in \
        browser.find_element(By.TAG_NAME, "main").text
    assert browser.find_elements(By.TAG_NAME, "img") == []
    assert console_problems(browser, expected_failures=(bad,)) == []
    # And the search's value in its box.
    search = "\"><script>document.title='pwned'</script>"
    load(browser, url_of(base, page="sessions", q=search))
    assert browser.find_element(By.CSS_SELECTOR, "form.search input[name=q]") \
        .get_attribute("value") == search
    assert browser.find_elements(By.TAG_NAME, "script") == []
    assert browser.title == "Sessions · mod_mcp console"
    assert console_problems(browser) == []


# ---- 5. the JSON form is what the page shows --------------------------------------------------


def test_the_json_form_matches_the_page(stack, browser, http, made):
    By = by()
    base = console_url(stack)

    # The sessions list (the module's two sessions).
    doc, rows = agreeing(http, browser, base, session_rows, page="sessions", q=made.run)
    assert len(doc["sessions"]) == 2
    assert rows == [{
        "tag": s["tag"],
        "href": url_of(base, page="session", s=s["ref"]),
        "cells": [s["user"] or "-",
                  f"{s['client']} {s['client_version']}" if s["client_version"] else s["client"],
                  s["protocol"], s["backend"], when(s["started"]), when(s["last_seen"]),
                  str(s["calls"]),
                  f"{s['state']} (by {s['ended_by']})" if s["ended_by"] else s["state"]],
    } for s in doc["sessions"]]
    assert doc["sessions"][0]["calls"] == 1 and doc["sessions"][1]["calls"] == 4
    assert doc["query"] == {"q": made.run, "before": None, "state": "all"}
    assert doc["next"] is None

    # The transcript.
    def transcript(driver):
        return [read_event_item(li) for li in transcript_items(driver)]

    doc, items = agreeing(http, browser, base, transcript, page="session", s=made.ref)
    assert doc["session"]["tag"] == made.tag and doc["session"]["ref"] == made.ref
    assert len(doc["events"]) == doc["session"]["events"] == len(event_rows(stack, made.sid))
    assert items == [expected_item(e) for e in doc["events"]]
    # A later page of it (after= an event id) is the rest, with a way back to the start.
    after = doc["events"][4]["id"]
    later, items = agreeing(http, browser, base, transcript, page="session", s=made.ref,
                            after=str(after))
    assert later["events"] == doc["events"][5:] and later["query"]["after"] == after
    assert items == [expected_item(e) for e in later["events"]]
    back = browser.find_element(By.PARTIAL_LINK_TEXT, "from the start").get_attribute("href")
    assert parse_qs(urlsplit(back).query) == {"page": ["session"], "s": [made.ref]}
    # The other httpd instance's console says the same (one database).
    if len(stack.get("MCP_CONSOLE_URLS", "").split()) > 1:
        assert without(get_json(http, console_url(stack, 1), page="session", s=made.ref),
                       "generated_at") == without(doc, "generated_at")

    # A stream.
    stream = next(e["stream"] for e in doc["events"]
                  if e["text"] and summary_of(e["kind"], e["text"])[0] ==
                  f"tools/call #{json.dumps(made.slow_rid)}")

    def stream_page(driver):
        return [read_event_item(li) for li in
                driver.find_elements(By.CSS_SELECTOR, "main > ul.events > li")]

    doc, items = agreeing(http, browser, base, stream_page, page="stream", id=str(stream))
    assert doc["stream"]["id"] == stream and len(doc["events"]) == 6
    assert items == [expected_item(e, with_stream=False) for e in doc["events"]]

    # The tools page.
    def tools(driver):
        out = []
        for tr in driver.find_elements(By.CSS_SELECTOR, "main table tr")[1:]:
            out.append([td.text for td in tr.find_elements(By.TAG_NAME, "td")])
        labels = [t.get_attribute("textContent") for t in driver.find_elements(
            By.CSS_SELECTOR, "figure.plot svg text.label")]
        return out, labels

    doc, (table, labels) = agreeing(http, browser, base, tools, page="tools", window="1h")
    ms = lambda v: "-" if v is None else f"{v:.1f}"   # noqa: E731
    assert table == [[t["tool"], t["backend"], str(t["calls"]), str(t["errors"]),
                      f"{t['error_rate'] * 100:.1f} %", ms(t["p50_ms"]), ms(t["p90_ms"]),
                      ms(t["p99_ms"]), ms(t["max_ms"])] for t in doc["tools"]]
    assert labels == [t["tool"] for t in doc["tools"]]
    assert console_problems(browser) == []


# ---- 6. bad input ----------------------------------------------------------------------------

BAD = [
    # (query string, how the message starts after "Bad Request: ")
    ("page=nope", "page: not one of overview, sessions, session, stream, tools"),
    ("page=session", "s: the session page needs a session's tag"),
    ("page=session&s=XYZ", "s: not a session's tag"),
    ("page=session&s=0123456", "s: not a session's tag"),
    ("page=stream&id=-1", "id: not a stream id"),
    ("page=stream&id=0", "id: not a stream id"),
    ("page=stream", "id: the stream page needs a stream id"),
    ("page=overview&bogus=1", "bogus: the overview page takes no such parameter"),
    ("page=tools&s=01234567", "s: the tools page takes no such parameter"),
    ("page=sessions&q=a&q=b", "q: given more than once"),
    ("page=sessions&q=a%00b", "the query string has a broken %-escape (or %00)"),
    ("page=sessions&q=%zz", "the query string has a broken %-escape (or %00)"),
    ("page=sessions&state=gone", "state: not one of all, live, ended"),
    ("page=sessions&before=yesterday", "before: not a time"),
    ("page=sessions&before=99", "PostgreSQL cannot read a value of the query (SQLSTATE 22"),
    ("page=tools&window=2h", "window: not one of 5m, 1h, 24h, 7d"),
    ("page=session&s=01234567&after=-1", "after: not a non-negative integer"),
]


def test_bad_input_gets_a_precise_status(stack, http):
    base = console_url(stack)
    for query, message in BAD:
        r = raw_get(f"{base}?{query}&format=json")
        assert r.status_code == 400, (query, r.status_code, r.text)
        assert r.headers["Content-Type"] == "application/json", query
        assert_security_headers(r)
        body = r.json()
        assert set(body) == {"error"} and set(body["error"]) == {"status", "message"}, body
        assert body["error"]["status"] == 400, body
        assert body["error"]["message"].startswith("Bad Request: " + message), (query, body)
        # And as a page, without format=json.
        r = raw_get(f"{base}?{query}")
        assert r.status_code == 400, (query, r.status_code)
        assert r.headers["Content-Type"] == "text/html; charset=utf-8", query
        assert_security_headers(r)
        assert "<title>Error 400 · mod_mcp console</title>" in r.text
        assert "Bad Request: " + message.replace("'", "&#39;").replace('"', "&quot;") in r.text
    # The stylesheet comes alone.
    r = http.get(f"{base}?asset=console.css&format=json", timeout=30)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith(
        "Bad Request: asset: only console.css"), r.text
    assert_security_headers(r)


def test_post_is_405_with_the_security_headers(stack, http):
    base = console_url(stack)
    problems = []
    for method in ("POST", "PUT", "DELETE"):
        r = raw_get(url_of(base, page="overview"), method, b"x")
        assert r.status_code == 405, (method, r.status_code, r.text[:300])
        # The security headers are on the 405 too (they live in r->err_headers_out, which
        # httpd keeps on answers it makes itself).
        missing = security_problems(r)
        if missing:
            problems.append(f"{method}: 405 with {missing}: {dict(r.headers)}")
        # Allow names GET (httpd's own 405 would name only what r->allowed_methods holds).
        if "GET" not in [m.strip() for m in r.headers.get("Allow", "").split(",")]:
            problems.append(f"{method}: 405 whose Allow does not name GET: "
                            f"{r.headers.get('Allow')!r}")
    assert problems == [], "\n".join(problems)


# ---- 7. the tools page ---------------------------------------------------------------------


def test_the_tools_page_counts_the_calls_made(stack, browser, http, made):
    By = by()
    base = console_url(stack)
    load(browser, base)
    browser.find_element(By.LINK_TEXT, "Tools").click()
    assert parse_qs(urlsplit(browser.current_url).query) == {"page": ["tools"]}
    READ.append(browser.page_source)
    assert browser.title == "Tools · mod_mcp console"
    browser.find_element(By.LINK_TEXT, "5m").click()
    assert parse_qs(urlsplit(browser.current_url).query) == {"page": ["tools"],
                                                             "window": ["5m"]}
    READ.append(browser.page_source)
    rows = {}
    for tr in browser.find_elements(By.CSS_SELECTOR, "main table tr")[1:]:
        cells = [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        rows.setdefault(cells[0], []).append((int(cells[2]), int(cells[3]),
                                              tr.get_attribute("class")))
    for tool, n in made.calls.items():
        assert tool in rows, (tool, rows)
        assert sum(calls for calls, _, _ in rows[tool]) >= n, (tool, rows[tool])
    assert sum(errors for _, errors, _ in rows["fail"]) >= 1
    assert all(cls == "bad" for _, errors, cls in rows["fail"] if errors)
    # The latency plot has a row for each tool of the table.
    labels = [t.get_attribute("textContent") for t in browser.find_elements(
        By.CSS_SELECTOR, "figure.plot svg text.label")]
    assert set(made.calls) <= set(labels)
    # The JSON form counts them too.
    doc = get_json(http, base, page="tools", window="5m")
    assert doc["query"] == {"window_s": 300}
    counted = {}
    for t in doc["tools"]:
        counted[t["tool"]] = counted.get(t["tool"], 0) + t["calls"]
    for tool, n in made.calls.items():
        assert counted.get(tool, 0) >= n, (tool, doc["tools"])
    assert console_problems(browser) == []


# ---- 6 (end). no page gave a session id away ----------------------------------------------


def test_no_page_holds_a_session_id(stack, browser, http, made):
    base = console_url(stack)
    stream = next(r[3] for r in event_rows(stack, made.sid) if r[3] is not None)
    pages = [{}, {"page": "sessions"}, {"page": "sessions", "q": made.tag},
             {"page": "sessions", "q": made.client}, {"page": "session", "s": made.tag},
             {"page": "session", "s": made.ref}, {"page": "stream", "id": str(stream)},
             {"page": "tools"}, {"page": "tools", "window": "7d"}]
    for params in pages:
        get_json(http, base, **params)
        get_html(http, base, **params)
        load(browser, url_of(base, **params))
    assert console_problems(browser) == []
    assert len(READ) >= 3 * len(pages)
    for sid in (made.sid, made.other_sid):
        leaks = [page[:200] for page in READ if sid in page]
        assert leaks == [], f"a page holds the session id {sid}: {leaks}"
