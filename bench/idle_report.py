#!/usr/bin/python3
"""bench/idle_report.py — the "streams without a thread" section of bench/results.md.

    bench/idle_report.py [--h2 H2.json] [--m1 RESULTS.json] RUN.json...
        RUN.json: the --json files of bench/idle_streams.py runs; H2.json: bench/h2_rounds.py's;
        RESULTS.json: bench/results.json of the same run (measurement 1, with its
        MCPAsyncStreams Off target)

Prints a Markdown section: the goals of issue 20 beside the baseline (MCPAsyncStreams Off, every
stream holding its thread) and the parked streams, all from the same bench/run. bench/run
appends it to bench/results.md.
"""
import argparse
import json
import statistics


def load(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        r["_file"] = p
        runs.append(r)
    return runs


def fmt(x, unit="", digits=0):
    if x is None:
        return "—"
    if isinstance(x, float):
        x = round(x, digits) if digits else round(x)
    return f"{x:,}{unit}" if isinstance(x, int) else f"{x}{unit}"


def opened(r):
    return f"{r['streams_open']:,} of {r['streams_requested']:,}"


def fresh(r):
    o, n = r["fresh_streams_open"], r["fresh_none_open"]
    if not o.get("answered"):
        return f"no answer ({o.get('tried', 0)} tried; {fmt(n.get('p50_ms'), ' ms', 1)} with none open)"
    ratio = r.get("fresh_p50_ratio")
    return (f"{fmt(o['p50_ms'], ' ms', 1)} vs {fmt(n['p50_ms'], ' ms', 1)}"
            + (f" (×{ratio})" if ratio else ""))


def threads(r):
    return (f"{r['httpd_with_streams']['threads']} ({r['httpd_before']['threads']} before, "
            f"{r['httpd_with_streams']['processes']} processes)")


def notify(r):
    n = r["notify"]
    if not n.get("delivered"):
        return f"none delivered ({n.get('lost', 0)} lost)"
    return f"p99 {fmt(n['p99_ms'], ' ms', 1)} (p50 {fmt(n['p50_ms'], ' ms', 1)})"


def broadcast(r):
    b = r.get("broadcast")
    if not b:
        return "—"
    within = (f"within {fmt(b['all_within_ms'] / 1000, ' s', 1)}" if b.get("all_within_ms")
              is not None else "got it by the end of the wait (not all)")
    p50 = f" (p50 {fmt(b['p50_ms'] / 1000, ' s', 1)})" if b.get("p50_ms") is not None else ""
    return f"{b['received']:,} of {b['streams']:,} {within}{p50}"


def slow(r):
    s = r.get("slow")
    if not s:
        return "—"
    return (f"{s['answered']:,} of {s['calls']:,} answered in {s['seconds']} s, "
            f"{s['httpd_threads_in_flight']} threads in flight")


def idle(r):
    i = r.get("idle")
    if not i:
        return "—"
    n = max(i["streams"], 1)
    return (f"{fmt(i['wal_bytes_per_s'] / n, ' B/s', 0)} per stream "
            f"({i['write_transactions_per_s']} transactions/s, PostgreSQL "
            f"{i['postgres_cores']} cores, httpd {i.get('httpd_cores', '?')} cores, "
            f"over {i['seconds']} s)")


def h2_rounds(path):
    """The HTTP/2 rounds row: N rounds on one connection, then a call, On beside Off."""
    with open(path) as f:
        h = json.load(f)
    n = h["config"]["rounds"]

    def one(r):
        call = (f"call answered after {fmt(r['call_seconds'] * 1000, ' ms')}" if r["call_answered"]
                else "call not answered")
        return (f"{r['rounds_answered']} of {r['rounds']} rounds in "
                f"{fmt(r['rounds_seconds'], ' s', 2)}, {call}, {r['retries_answered']} retries "
                f"answered")
    return n, h["config"], one(h["off"]), one(h["on"])


def m1_rows(path):
    """Measurement 1 through the gateway, MCPAsyncStreams Off beside On (same run)."""
    with open(path) as f:
        res = json.load(f)
    runs = res.get("runs", {}).get("m1", {})

    def med(key, field):
        rs = runs.get(key) or []
        vals = [r[field] for r in rs if r.get(field) is not None]
        return statistics.median(vals) if vals else None
    rows = []
    for target in ("mod_mcp-threaded", "mod_mcp"):
        c8, c32 = med(f"{target}/8", "rps"), med(f"{target}/32", "rps")
        p1, b1 = med(f"{target}/1", "p50_us"), med("backend/1", "p50_us")
        added = (p1 - b1) / 1000 if p1 is not None and b1 is not None else None
        rows.append((c8, c32, added))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--h2")
    ap.add_argument("--m1")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    runs = load(a.runs)
    base = [r for r in runs if r["config"].get("async_streams") == "off"]
    on = [r for r in runs if r["config"].get("async_streams") != "off"]
    plain = [r for r in on if not r["config"].get("tls") and not r.get("slow")]
    tls = [r for r in on if r["config"].get("tls")]
    slowr = [r for r in on if r.get("slow")]
    cols = [("baseline: MCPAsyncStreams Off", base[0] if base else None),
            ("parked, HTTP/1.1", plain[0] if plain else None),
            ("parked, TLS", tls[0] if tls else None)]
    cols = [(h, r) for h, r in cols if r]
    w = print
    w("## 7. Streams without a thread (issue 20)")
    w("")
    w("`bench/idle_streams.py` (one httpd instance, event MPM, "
      + (f"{cols[0][1]['config'].get('workers')} worker threads in "
         f"{cols[0][1]['config'].get('children')} processes" if cols else "")
      + ", per-principal limits off, `AsyncRequestWorkerFactor` sized for the streams): N idle "
      "MCP sessions, each holding its standalone GET (initialize, notifications/initialized, GET "
      "on one keep-alive connection, raw asyncio sockets), then a fresh client's initialize + "
      "echo, 20 `notify` calls to random streams (call sent → event read on that stream), and the "
      "test backend's POST /broadcast (one `tools/list_changed` per backend GET stream). The "
      "baseline is the same module with `MCPAsyncStreams Off`, in the same run: every stream "
      "holds a worker thread, so it is measured at a scale just above the workers.")
    w("")
    w("| figure | goal | " + " | ".join(h for h, _ in cols) + " |")
    w("|---|---|" + "---|" * len(cols))
    rows = [
        ("idle standalone streams held", "10,000", opened),
        ("fresh client's initialize + tools/call p50, streams open vs none", "≤ 1.25×", fresh),
        ("httpd threads with the streams", "≤ 256", threads),
        ("httpd RSS per idle stream", "≤ 16 KiB",
         lambda r: fmt(r.get("rss_per_stream_kib"), " KiB", 1)),
        ("a notification to one stream, delivered", "p99 ≤ 20 ms", notify),
        ("`tools/list_changed` to every stream", "all within 5 s", broadcast),
        ("WAL of the idle streams' leases (`--idle-secs`)", "—", idle),
    ]
    for name, goal, f in rows:
        w(f"| {name} | {goal} | " + " | ".join(f(r) for _, r in cols) + " |")
    w("")
    if a.h2:
        n, cfg, off, on = h2_rounds(a.h2)
        w(f"**Era-bridge rounds on one HTTP/2 connection** (`bench/h2_rounds.py`, "
          f"{'h2 over TLS' if cfg.get('tls') else 'h2c'}, one instance): {n} input-required "
          f"rounds opened at once on one connection, then an `echo` call on it, then every round "
          f"retried (goal: the call answered at once). MCPAsyncStreams Off (the relay keeps its "
          f"request, and its HTTP/2 stream, until the retry; rounds expire after "
          f"{cfg.get('input_timeout_s')} s here): {off}. On (a round ends its request; the "
          f"call's backend half goes on in the event loop): {on}.")
        w("")
    if a.m1:
        rows = m1_rows(a.m1)
        w("**Calls through the event loop** (measurement 1 of this run, `echo` on 2025-11-25 "
          "sessions, 32 sessions; goal: not worse than the thread-per-request path). The same "
          "module and stack; the Off location relays every answer on its request's thread.")
        w("")
        w("| path | calls/s c=8 | calls/s c=32 | added p50 at c=1 (vs backend alone) |")
        w("|---|---:|---:|---:|")
        for label, (c8, c32, added) in zip(("MCPAsyncStreams Off (threads)",
                                            "MCPAsyncStreams On (event loop)"), rows):
            w(f"| {label} | {fmt(c8)} | {fmt(c32)} | {fmt(added, ' ms', 2)} |")
        w("")
    if slowr:
        r = slowr[0]
        w(f"Concurrent `slow` calls (10 s each) with streams parked: {slow(r)} "
          f"({r['config'].get('workers')} workers). A 2025-11-25 session's answer that takes "
          "longer than 2 s is parked (its POST on the event loop; the bench's sessions "
          "speak " + r.get("protocol", "?") + "); older sessions' answers and 2026-07-28 calls are parked the same way.")
        w("")
    w("Files: " + ", ".join(f"`{r['_file'].rsplit('/', 1)[-1]}`" for r in runs)
      + " (bench/idle_streams/).")


if __name__ == "__main__":
    main()
