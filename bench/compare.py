#!/usr/bin/python3
"""bench/compare.py — two benchmark runs side by side (before and after a change).

    bench/compare.py BEFORE.json AFTER.json [> comparison.md]

Each file is a bench/results.json written by bench/run (keep the first one before running again,
e.g. `bench/run --tree /tmp/old-clone && cp bench/results.json /tmp/before.json && bench/run`).
Prints a Markdown table of the headline numbers of both runs (medians) and their ratio.
"""
import json
import statistics
import sys


def med(xs):
    xs = [x for x in xs if x is not None and x == x]
    return statistics.median(xs) if xs else float("nan")


def get(res, section, key, field, scale=1.0):
    return med([r.get(field) for r in res["runs"].get(section, {}).get(key, [])]) * scale


def rows(res):
    out = []
    for c in (1, 8, 32):
        out.append((f"1. mod_mcp calls/s, concurrency {c}", get(res, "m1", f"mod_mcp/{c}", "rps"),
                    "higher"))
        out.append((f"1. mod_mcp p50 ms, concurrency {c}",
                    get(res, "m1", f"mod_mcp/{c}", "p50_us", 1e-3), "lower"))
        out.append((f"1. mod_mcp p99 ms, concurrency {c}",
                    get(res, "m1", f"mod_mcp/{c}", "p99_us", 1e-3), "lower"))
    g1 = res["runs"].get("m1", {}).get("mod_mcp/1", [])
    for k, name in (("commits", "transactions"), ("notifies", "NOTIFYs"), ("events", "event rows")):
        out.append((f"1. {name} per call", med([r.get(f"{k}_per_s", float("nan")) / r["rps"]
                                                for r in g1]), "lower"))
    out.append(("1. added latency vs backend alone, p50 ms, concurrency 1",
                get(res, "m1", "mod_mcp/1", "p50_us", 1e-3)
                - get(res, "m1", "backend/1", "p50_us", 1e-3), "lower"))
    out.append(("1. new TCP connections per call (to the backend), concurrency 8",
                get(res, "m1", "mod_mcp/8", "tcp_opens_per_call"), "lower"))
    out.append(("2. new TCP connections per call (to server-everything), concurrency 8",
                get(res, "m2", "mod_mcp→SE/8", "tcp_opens_per_call"), "lower"))
    for c in (1, 8, 32):
        out.append((f"2. mod_mcp → server-everything calls/s, concurrency {c}",
                    get(res, "m2", f"mod_mcp→SE/{c}", "rps"), "higher"))
    for c in (1, 8, 32):
        out.append((f"2. mod_mcp → stdio server-everything calls/s, concurrency {c}",
                    get(res, "m2", f"mod_mcp→stdio SE/{c}", "rps"), "higher"))
    out.append(("2. supergateway calls/s, concurrency 8 (reference)",
                get(res, "m2", "supergateway/8", "rps"), "higher"))
    out.append(("3. events stored/s by the gateway, concurrency 32",
                get(res, "m1", "mod_mcp/32", "events_per_s"), "higher"))
    for n in sorted(int(k) for k in res["runs"].get("m4", {})):
        out.append((f"4. replay of {n:,} events, s", get(res, "m4", str(n), "seconds"), "lower"))
    for k in ("light", "heavy"):
        out.append((f"5. cross-process delay p50 ms, {k} load", get(res, "m5", k, "p50_ms"), "lower"))
        out.append((f"5. cross-process delay p99 ms, {k} load", get(res, "m5", k, "p99_ms"), "lower"))
    out.append(("5. background calls/s during heavy load", get(res, "m5", "heavy", "load_rps"),
                "higher"))
    m6 = res.get("m6") or []
    if m6:
        out.append(("6. httpd RSS per idle stream, first cycle, KiB", m6[0]["rss_per_stream_kb"],
                    "lower"))
        out.append(("6. database connections with the streams open",
                    med([r["db_held"]["total"] for r in m6]), "lower"))
    m7 = (res.get("m7") or {}).get("snapshots") or []
    if len(m7) > 2:
        out.append(("7. httpd RSS growth under load, bytes per call",
                    (m7[-1]["rss_kb"] - m7[1]["rss_kb"]) * 1024
                    / max(m7[-1]["calls"] - m7[1]["calls"], 1), "lower"))
    for c in (1, 8):
        out.append((f"10. federated (3 members) tools/call calls/s, concurrency {c}",
                    get(res, "m10", f"call federated/{c}", "rps"), "higher"))
    out.append(("10. federated (3 members) tools/list p50 ms, concurrency 1",
                get(res, "m10", "list federated/1", "p50_us", 1e-3), "lower"))
    for v in ("as shipped", "NOTIFY triggers disabled", "synchronous_commit off"):
        out.append((f"attribution, concurrency 32, {v}: calls/s",
                    get(res, "attr", v, "rps"), "higher"))
    return out


def fmt(x):
    if x != x:
        return "–"
    return f"{x:,.2f}" if abs(x) < 100 else f"{x:,.0f}"


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    a, b = (json.load(open(p)) for p in sys.argv[1:])
    fa, fb = a["facts"], b["facts"]
    print("| | before | after | after / before |")
    print("|---|---:|---:|---:|")
    print(f"| mod_mcp | {fa.get('mod_mcp commit', '?')} | {fb.get('mod_mcp commit', '?')} | |")
    print(f"| run | {fa['date']}, {a['mode']} | {fb['date']}, {b['mode']} | |")
    for (name, x, better), (_, y, _) in zip(rows(a), rows(b)):
        ratio = y / x if x and x == x and y == y else float("nan")
        print(f"| {name} ({better} is better) | {fmt(x)} | {fmt(y)} | "
              f"{'–' if ratio != ratio else f'{ratio:.2f}×'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
