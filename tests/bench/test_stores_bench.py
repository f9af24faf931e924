"""The stores bench never waits for ever: a child that says nothing, or that does not
exit on SIGTERM, ends the run with an error naming it (bench/stores.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.harness import BenchError
from bench.stores import Lines, _end

SILENT_AND_DEAF = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('up', flush=True); time.sleep(60)"
)


def _child() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SILENT_AND_DEAF],
                            stdout=subprocess.PIPE, text=True)


def test_a_line_that_does_not_come_is_an_error_not_a_hang():
    child = _child()
    try:
        lines = Lines(child.stdout, "the silent child")
        assert lines.next(10) == "up"
        with pytest.raises(BenchError, match="the silent child: nothing within 0.3 s"):
            lines.next(0.3)
    finally:
        child.kill()
        child.wait()


def test_a_process_deaf_to_sigterm_is_killed_and_named():
    child = _child()
    assert Lines(child.stdout, "the deaf child").next(10) == "up"
    with pytest.raises(BenchError, match="the deaf child did not exit within 0.5 s"):
        _end(child, "the deaf child", timeout=0.5)
    assert child.poll() is not None  # killed


def test_the_end_of_a_process_ends_the_wait_for_its_line():
    child = subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.PIPE, text=True)
    with pytest.raises(BenchError, match="the short child: the process ended"):
        Lines(child.stdout, "the short child").next(30)
    child.wait()
