#!/usr/bin/python3
"""bench/idle_report.py — the "streams without a thread" section of bench/results.md.

    bench/idle_report.py RUN.json...     (the --json files of bench/idle_streams.py runs)

Prints a Markdown section: the goals of issue 20 beside the baseline (MCPAsyncStreams Off, every
stream holding its thread) and the parked streams, all from the same bench/run. bench/run
appends it to bench/results.md.
"""
import json
import sys


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
    return (f"{b['received']:,} of {b['streams']:,} within {fmt(b['all_within_ms'] / 1000, ' s', 1)}"
            f" (p50 {fmt(b['p50_ms'] / 1000, ' s', 1)})")


def slow(r):
    s = r.get("slow")
    if not s:
        return "—"
    return (f"{s['answered']:,} of {s['calls']:,} answered in {s['seconds']} s, "
            f"{s['httpd_threads_in_flight']} threads in flight")


def main():
    runs = load(sys.argv[1:])
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
    ]
    for name, goal, f in rows:
        w(f"| {name} | {goal} | " + " | ".join(f(r) for _, r in cols) + " |")
    w("")
    if slowr:
        r = slowr[0]
        w(f"Concurrent `slow` calls (10 s each) with streams parked: {slow(r)} "
          f"({r['config'].get('workers')} workers). A 2025-11-25 session's answer that takes "
          "longer than 100 ms is parked (its POST on the event loop; the bench's sessions "
          "speak " + r.get("protocol", "?") + "); older sessions' answers hold a thread.")
        w("")
    w("Files: " + ", ".join(f"`{r['_file'].rsplit('/', 1)[-1]}`" for r in runs)
      + " (bench/idle_streams/).")


if __name__ == "__main__":
    main()
