"""The unit tier runs in its process: a test that leaves a process running that it started
(a fork server, actor workers, a command) fails. The standard library's and libraries' own
helper processes, started once on first use, are not a test's: multiprocessing's resource
tracker (the first named semaphore) and pyglfw's probe of the GL library's version (when
dm_control first imports it)."""

from __future__ import annotations

import psutil
import pytest

LIBRARY_HELPERS = ("multiprocessing.resource_tracker", "glfwGetVersion")


def _children() -> dict[int, str]:
    found = {}
    for process in psutil.Process().children(recursive=True):
        try:
            found[process.pid] = " ".join(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.fixture(autouse=True)
def starts_no_process():
    before = _children()
    yield
    started = {pid: command for pid, command in _children().items()
               if pid not in before and not any(helper in command for helper in LIBRARY_HELPERS)}
    assert not started, f"a unit test started processes (they belong in tests/component): {started}"
