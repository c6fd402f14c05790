#!/usr/bin/python3
"""docs/make-screenshots.py — the console's screenshots in docs/ (README, "The console").

    docs/make-screenshots.py [OUTDIR]      (default: docs/)

Starts its own stack (tests/stack up in a temporary directory), makes a few sessions of two users
with three client names through the Basic-auth endpoint (echo, add, a failing tool, slow calls
with progress, one hostile tool result), then opens the console in headless Chromium (Debian's
chromium and chromium-driver, python3-selenium: scripts/deps) and saves console-overview.png,
console-session.png (the last session's transcript, its slow call unfolded) and
console-tools.png. Stops the stack at the end.
"""
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from conftest import load_stack_env  # noqa: E402
from mcp_client import McpSession    # noqa: E402

from selenium import webdriver                      # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By        # noqa: E402


def traffic(env: dict) -> str:
    random.seed(7)
    users = [("alice", "alice-pw"), ("bob", "bob-pw")]
    clients = [("claude-code", "2.1.3"), ("cursor", "1.9.0"), ("mcp-inspector", "0.17.2")]
    last = ""
    for k in range(6):
        s = McpSession(env["MCP_AUTH_URL"], auth=users[k % 2])
        s.initialize(client_info={"name": clients[k % 3][0], "version": clients[k % 3][1]})
        for i in range(random.randint(8, 25)):
            r = random.random()
            if r < 0.6:
                s.call("tools/call", {"name": "echo", "arguments": {"text": f"hello {i}"}})
            elif r < 0.75:
                s.call("tools/call", {"name": "add", "arguments": {"a": i, "b": 2}})
            elif r < 0.85:
                s.call("tools/call", {"name": "fail", "arguments": {}})
            else:
                s.call("tools/call", {"name": "slow", "_meta": {"progressToken": f"p{i}"},
                                      "arguments": {"count": 3,
                                                    "interval_ms": random.randint(20, 120)}})
        if k == 5:
            s.call("tools/call", {"name": "echo",
                                  "arguments": {"text": "<script>alert('shown as text')</script>"}})
            s.call("tools/call", {"name": "slow", "_meta": {"progressToken": "demo"},
                                  "arguments": {"count": 4, "interval_ms": 60}})
            last = s.session_id
        elif k % 3 == 0:
            s.delete()
        s.close()
    return last


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "docs")
    d = tempfile.mkdtemp(prefix="mcp-shots.")
    subprocess.run([str(REPO / "tests" / "stack"), "up", "--dir", d, "--httpd", "1"], check=True,
                   stdout=subprocess.DEVNULL)
    driver = None
    try:
        env = load_stack_env(Path(d) / "stack.env")
        sid = traffic(env)
        import hashlib
        ref = hashlib.md5(sid.encode()).hexdigest()[:16]
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                  "--window-size=1280,1000"):
            opts.add_argument(a)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        base = env["MCP_CONSOLE_URL"]
        driver.get(base)
        driver.save_screenshot(str(out / "console-overview.png"))
        driver.get(f"{base}?page=session&s={ref}")
        events = driver.find_elements(By.CSS_SELECTOR, "ul.events > li > details > summary")
        # The last call's messages: its request, priming, progress and result.
        for summary in events[-7:]:
            summary.find_element(By.CSS_SELECTOR, "span.m").click()   # not its stream link
        driver.execute_script("arguments[0].scrollIntoView()", events[-8])
        driver.save_screenshot(str(out / "console-session.png"))
        driver.get(f"{base}?page=tools&window=1h")
        driver.save_screenshot(str(out / "console-tools.png"))
        print(f"wrote {out}/console-overview.png, console-session.png, console-tools.png")
    finally:
        if driver:
            driver.quit()
        subprocess.run([str(REPO / "tests" / "stack"), "down", "--dir", d],
                       stdout=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
