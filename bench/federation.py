#!/usr/bin/python3
"""bench/federation.py — a federated endpoint of three members beside the single-backend one, in
one run: bench/run's measurement 10 alone (the same code, bench.Bench.m10), the short way. Run
as root from the repository; wrk and psycopg2 must be installed (bench/run installs them):

    bench/federation.py [--secs 5] [--reps 3] [--module PATH]

One stack (tests/stack up --httpd 1 --mpm event --conf ...: one instance, 2 children x 64
threads, as bench/run's) serves /mcp (the C test backend behind mod_mcp), /mcp-fed3 (three
<MCPMember>s, each that same backend: a unprefixed, b_ and c_) and /mcp-fed1 (a alone;
bench.federated_conf). The points
are interleaved (rep 1 of each, then rep 2, ...; the order rotated per rep):

  * tools/call of echo at concurrency 1 and 8: /mcp's echo against /mcp-fed3's c_echo (the last
    member's, prefixed: routed by its prefix and renamed both ways); calls/s, p50/p99, the ratio
    of the federated call's p50 to the single one's (goal, issue 22: <= 1.1) and the CPU per
    call of httpd and of PostgreSQL;
  * tools/list at concurrency 1: the backend alone, /mcp, /mcp-fed1 (the first member alone:
    federation's own cost) and /mcp-fed3 (the three members asked at once, their lists merged);
    p50 and what the merge adds to one member's list through the gateway (goal: <= 1 ms).

The module is copied when the run starts (a rebuild meanwhile changes nothing).
"""
import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (Bench.m10, federated_conf, httpd_conf, mcp_sessions, ...)


def per_call_ms(rs, label):
    """CPU milliseconds per call of one component (median over the runs)."""
    return bench.med([r["cpu"].get(label, 0.0) / r["rps"] * 1000 for r in rs])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--module", default=os.path.join(bench.REPO, "mod_mcp", ".libs", "mod_mcp.so"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (tests/stack runs PostgreSQL and httpd as their users)")
    work = tempfile.mkdtemp(prefix="mcp-bench-federation.")
    os.chmod(work, 0o755)
    module = os.path.join(work, "mod_mcp.so")
    shutil.copy(a.module, module)
    os.chmod(module, 0o644)
    conf = os.path.join(work, "federation.conf")
    with open(conf, "w") as f:
        f.write(bench.httpd_conf(2, 64) + bench.federated_conf())
    b = bench.Bench(argparse.Namespace(tree=bench.REPO, work=work, quick=False, module=module))
    b.dur, b.reps = a.secs, a.reps
    rc = 0
    try:
        d, env = b.stack_up("stack", 1, conf)
        b.gw = env["MCP_URLS"].split()[0]
        b.backend = env["MCP_BACKEND_URL"]
        b.sf = lambda n: os.path.join(work, f"{n}.sessions")
        bench.mcp_sessions(b.backend, 32, b.sf("backend"))
        bench.mcp_sessions(b.gw, 32, b.sf("gw"))
        bench.mcp_call(b.gw, open(b.sf("gw")).readline().strip(), "echo", {"text": "hello"})
        b.m10()
        if b.results.get("m10_skipped"):
            raise SystemExit(f"measurement 10 skipped: {b.results['m10_skipped']}")
        R = lambda key: b.runs("m10", key)   # noqa: E731
        col = lambda key, field: [r[field] for r in R(key)]   # noqa: E731
        print(f"\nmedians of {a.reps} x {a.secs} s, interleaved; {len(bench.FED_MEMBERS)} members, "
              f"each the C test backend; federated call: {bench.FED_TOOL}")
        print("| request | c | single calls/s | federated calls/s | single p50 ms | "
              "federated p50 ms | p50 federated / single | p99 single / federated ms | "
              "httpd CPU ms/call single / federated | PG CPU ms/call single / federated |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in b.results["m10_concs"]:
            s, f = f"call single/{c}", f"call federated/{c}"
            ps, pf = bench.med(col(s, "p50_us")) / 1000, bench.med(col(f, "p50_us")) / 1000
            print(f"| tools/call echo | {c} | {bench.med(col(s, 'rps')):.0f} | "
                  f"{bench.med(col(f, 'rps')):.0f} | {ps:.2f} | {pf:.2f} | {pf / ps:.3f} | "
                  f"{bench.med(col(s, 'p99_us')) / 1000:.2f} / "
                  f"{bench.med(col(f, 'p99_us')) / 1000:.2f} | "
                  f"{per_call_ms(R(s), 'httpd'):.3f} / {per_call_ms(R(f), 'httpd'):.3f} | "
                  f"{per_call_ms(R(s), 'postgres'):.3f} / {per_call_ms(R(f), 'postgres'):.3f} |")
        print("\n| tools/list, c = 1 | lists/s | p50 ms | p99 ms | httpd CPU ms/list | "
              "PG CPU ms/list |")
        print("|---|---:|---:|---:|---:|---:|")
        p50 = {}
        for name, label in (("backend", "the backend alone"),
                            ("single", "/mcp (1 backend)"),
                            ("federated1", "/mcp-fed1 (1 member)"),
                            ("federated", f"/mcp-fed3 ({len(bench.FED_MEMBERS)} members)")):
            k = f"list {name}/1"
            p50[name] = bench.med(col(k, "p50_us")) / 1000
            print(f"| {label} | {bench.med(col(k, 'rps')):.0f} | {p50[name]:.2f} | "
                  f"{bench.med(col(k, 'p99_us')) / 1000:.2f} | {per_call_ms(R(k), 'httpd'):.3f} | "
                  f"{per_call_ms(R(k), 'postgres'):.3f} |")
        print(f"\ntools/list p50: 3 members - /mcp = {p50['federated'] - p50['single']:+.2f} ms "
              f"(goal <= +1 ms), of which 1 member - /mcp = "
              f"{p50['federated1'] - p50['single']:+.2f} ms (federation itself) and 3 members - 1 "
              f"member = {p50['federated'] - p50['federated1']:+.2f} ms (the members' number)")
        errors = {k: sum(r["errors"] for r in rs) for k, rs in b.results["runs"]["m10"].items()}
        if any(errors.values()):
            print(f"errors: {errors}")
            rc = 1
    finally:
        if not b.cleanup():
            rc = rc or 1
    if rc == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work directory kept: {work}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    sys.exit(main())
