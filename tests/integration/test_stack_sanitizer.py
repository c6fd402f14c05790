"""tests/stack down and the sanitizer's files: a report (ASan, LSan, UBSan, anything it does not
recognise) fails `down`; a file of the sanitizer's own warnings only (the symbolizer timing out on
a loaded machine) does not. Runs `down` on a stack directory that holds nothing but
DIR/sanitizer/, so no stack is started.

And the sanitizer settings tests/stack gives httpd (`tests/stack sanitizer-env`), with the ASan
runtime scripts/build --sanitize uses, on tests/integration/fixtures/dtls/ (a dynamic TLS block
16 bytes past a page boundary, which made LLVM 14's LeakSanitizer crash at exit): no crash,
a real leak is still reported, a pointer held only in dynamic TLS is no leak."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

# Not in scripts/test's ASan+UBSan pass: these tests start no stack of MCP_TEST_STACK_ARGS (their
# own demo library and sanitizer directories only), so that pass would run exactly what the event
# MPM pass ran.
pytestmark = pytest.mark.not_asan

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "tests" / "stack"
DTLS = Path(__file__).resolve().parent / "fixtures" / "dtls"

SYMBOLIZER = ("==4242==WARNING: Can't read from symbolizer at fd 3\n"
              "==4242==WARNING: external symbolizer didn't start up correctly!\n")

REPORTS = {
    "asan": ("==4301==WARNING: Can't read from symbolizer at fd 3\n"
             "==4301==ERROR: AddressSanitizer: heap-use-after-free on address 0x602000000010\n"
             "READ of size 8 at 0x602000000010 thread T3\n"
             "SUMMARY: AddressSanitizer: heap-use-after-free\n"),
    "leak": ("==4302==ERROR: LeakSanitizer: detected memory leaks\n\n"
             "Direct leak of 64 byte(s) in 1 object(s) allocated from:\n"
             "    #0 0x7f00 in malloc\n\n"
             "SUMMARY: AddressSanitizer: 64 byte(s) leaked in 1 allocation(s).\n"),
    "ubsan": "mod_mcp/mcp_sse.c:120:9: runtime error: signed integer overflow\n",
    "check": "==4304==AddressSanitizer CHECK failed: asan_allocator.cpp:190 \"((0)) != (0)\"\n",
    "unknown": "something the sanitizer wrote that this script does not know\n",
}


def down(d):
    return subprocess.run([str(STACK), "down", "--dir", str(d)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)


def sanitizer_dir(tmp_path, files):
    d = tmp_path / "stack"
    (d / "sanitizer").mkdir(parents=True)
    for name, text in files.items():
        (d / "sanitizer" / name).write_text(text)
    return d


def test_warnings_only_are_not_a_report(tmp_path):
    d = sanitizer_dir(tmp_path, {"asan.4242": SYMBOLIZER, "ubsan.4243": ""})
    r = down(d)
    assert r.returncode == 0, r.stderr
    assert "warnings only" in r.stderr and "Can't read from symbolizer" in r.stderr
    assert "SANITIZER REPORT" not in r.stderr


@pytest.mark.parametrize("kind", sorted(REPORTS))
def test_a_report_fails_down(tmp_path, kind):
    name = ("ubsan." if kind == "ubsan" else "asan.") + "4300"
    # beside a warnings-only file, which must not hide it
    d = sanitizer_dir(tmp_path, {"asan.4242": SYMBOLIZER, name: REPORTS[kind]})
    r = down(d)
    assert r.returncode != 0
    assert f"SANITIZER REPORT {d.resolve()}/sanitizer/{name}" in r.stderr
    assert REPORTS[kind].splitlines()[0] in r.stderr


# ---- the stack's sanitizer settings and LLVM 14's dynamic TLS bug ------------------------------


@pytest.fixture(scope="module")
def dtls_demo(tmp_path_factory):
    """fixtures/dtls built as scripts/build --sanitize builds (clang, its shared ASan runtime
    found through the rpath): (program, library, the runtime's clang major version)."""
    clang = shutil.which("clang")
    assert clang, "clang is missing (scripts/deps installs it)"
    rt = Path(subprocess.run([clang, "-print-file-name=libclang_rt.asan-x86_64.so"],
                             capture_output=True, text=True, check=True).stdout.strip())
    assert rt.is_file(), f"clang's shared ASan runtime is missing ({rt})"
    d = tmp_path_factory.mktemp("dtls")
    lib, prog = d / "libdtls.so", d / "dtls-demo"
    subprocess.run([clang, "-shared", "-fPIC", "-O1", "-o", str(lib), str(DTLS / "lib.c")], check=True)
    subprocess.run([clang, "-O1", "-g", "-fsanitize=address", "-shared-libasan", "-pthread",
                    "-o", str(prog), str(DTLS / "main.c"), "-ldl", f"-Wl,-rpath,{rt.parent}"],
                   check=True)
    m = re.search(r"/clang/(\d+)", str(rt))
    return prog, lib, int(m.group(1)) if m else None


def run_demo(demo, d, *args, asan_without=None):
    """The demo with the environment `tests/stack sanitizer-env` gives httpd (less one ASan
    option, asan_without), reporting into d/sanitizer/; then `tests/stack down --dir d`, which
    judges the reports. Returns (the main thread's block address, down's result)."""
    prog, lib, _ = demo
    se = subprocess.run([str(STACK), "sanitizer-env", "--dir", str(d), "--for", str(prog)],
                        capture_output=True, text=True, timeout=60)
    assert se.returncode == 0, se.stderr
    env = dict(line.split("=", 1) for line in se.stdout.splitlines())
    assert "intercept_tls_get_addr=0" in env["ASAN_OPTIONS"].split(":")
    if asan_without:
        env["ASAN_OPTIONS"] = ":".join(o for o in env["ASAN_OPTIONS"].split(":") if o != asan_without)
    env["PATH"] = "/usr/bin:/bin"
    run = subprocess.run([str(prog), str(lib), *args], env=env, capture_output=True, text=True,
                         timeout=60)
    m = re.match(r"block (0x[0-9a-f]+)", run.stdout)
    assert m, f"exit {run.returncode}: {run.stdout}{run.stderr}"
    return int(m.group(1), 16), down(d)


def test_dynamic_tls_block_at_page_offset_16_no_crash(dtls_demo, tmp_path):
    block, r = run_demo(dtls_demo, tmp_path / "stack")
    assert block % 4096 == 16, f"the demo's block is at {block:#x}, not where the bug bites"
    assert r.returncode == 0, r.stderr
    assert "SANITIZER REPORT" not in r.stderr


def test_a_real_leak_is_still_reported(dtls_demo, tmp_path):
    _, r = run_demo(dtls_demo, tmp_path / "stack", "leak")
    assert r.returncode != 0
    assert "ERROR: LeakSanitizer: detected memory leaks" in r.stderr
    assert "Direct leak of 33 byte(s) in 1 object(s)" in r.stderr and " in lose " in r.stderr
    # the objects held only by the two threads' dynamic TLS blocks count as reachable
    assert "leak of 100 byte(s)" not in r.stderr and "leak of 200 byte(s)" not in r.stderr


def test_without_the_option_the_runtime_crashes(dtls_demo, tmp_path):
    """Why tests/stack sets intercept_tls_get_addr=0: LLVM up to 16 crashes on this demo (fixed
    in LLVM 17). A newer runtime passes without it, and the option may go."""
    _, r = run_demo(dtls_demo, tmp_path / "stack", asan_without="intercept_tls_get_addr=0")
    if dtls_demo[2] is not None and dtls_demo[2] <= 16:
        assert r.returncode != 0
        assert "Tracer caught signal 11" in r.stderr
        assert "LeakSanitizer has encountered a fatal error" in r.stderr
    else:
        assert r.returncode == 0, r.stderr
