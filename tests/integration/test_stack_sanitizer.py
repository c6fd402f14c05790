"""tests/stack down and the sanitizer's files: a report (ASan, LSan, UBSan, anything it does not
recognise) fails `down`; a file of the sanitizer's own warnings only (the symbolizer timing out on
a loaded machine) does not. Runs `down` on a stack directory that holds nothing but
DIR/sanitizer/, so no stack is started."""

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "tests" / "stack"

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
