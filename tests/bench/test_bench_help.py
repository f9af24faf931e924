"""`python -m bench` help, made from the one list of benchmarks (bench/__main__.py
COMMANDS): the generic help names every benchmark, and each one's `--help` is its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


def bench(*args: str) -> str:
    run = subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True)
    return run.stdout


def test_the_generic_help_lists_every_benchmark():
    text = bench("--help")
    for name in (*COMMANDS, "fairness", "hotpath", "proxy", "relay"):
        assert f"\n    {name} " in text or f"\n    {name}\n" in text, name


def test_every_module_with_a_main_is_a_listed_benchmark():
    modules = {p.stem for p in (ROOT / "bench").glob("*.py")
               if "\ndef main(" in p.read_text() and p.stem != "__main__"}
    own = {name for name, command in COMMANDS.items() if command.own_options}
    # proxy_attack is `python -m bench proxy --attack`
    assert modules - set(COMMANDS) <= {
        "router_process", "echo", "minimal_router", "memray_run", "proxy_attack"
    }
    assert own <= modules


@pytest.mark.parametrize("name", ["memory", "burst", "memray"])
def test_a_benchmarks_help_is_its_own(name: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exited:
        main([name, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: python -m bench {name} ")
    assert COMMANDS[name].summary.split(":")[0][:30] in " ".join(text.split())
    others = {"memory": "--clients", "burst": "--breakdown", "memray": "--sizes"}
    assert others[name] not in text  # options of other benchmarks are not offered


def test_a_benchmark_with_its_own_options_gets_its_own_help():
    assert "--light-windows" in bench("hotpath", "--help")

