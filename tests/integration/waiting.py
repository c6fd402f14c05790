"""Waiting for something another process makes true (a database row, a socket), with a deadline."""

import time


def wait_for(predicate, timeout=20.0, what="condition", interval=0.05):
    """Poll predicate until it returns a true value (returned), or fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
