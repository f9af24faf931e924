"""The supervisor of `serve --workers N` (N > 1; docs/workers.md).

It binds the router's address once and hands the listening socket to N worker
processes, each a `smp-router serve` with the same arguments, its own Trio
loop, its share of the queues and its share of the data directory. The
workers accept from the one socket (an inherited descriptor, not SO_REUSEPORT:
the supervisor holds the address while a worker restarts and nothing waiting
in the backlog is lost with a worker; docs/workers.md#the-listener). A worker
that dies is started again; SIGTERM, SIGINT, SIGHUP and SIGUSR2 (drain) are
passed on to every worker. The supervisor prints the ready line once every
worker has printed its own, and ends when they have all ended after a stop or
a drain. It keeps the router's caps on connections for every worker
(admission.py), serves its control and metrics ports (operator.py) and writes
its one stats log (stats.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import trio

from ..core.limits import RouterBudgets, new_queue_limits
from ..core.ownership import Ownership
from ..edge.identity import load_or_create_identity
from ..edge.listen import naming_address
from ..edge.listener import bind_listening_socket
from ..settings.config import RouterConfig, StartupError
from .admission import serve_router_admission
from .handoff import group_of_supervisor
from .operator import SupervisedRouter, start_router_ports
from .seat import IDENTITY_ENV, WORKER_ENV, WorkerSeat
from .stats import run_stats_log

log = logging.getLogger("smp-router")

RESTART_DELAYS = (0.1, 0.5, 1.0, 2.0, 5.0)  # seconds before the 1st, 2nd, ... restart in a row
STEADY_RUN = 30.0  # seconds a worker must run for its next death to count as the first
FINAL_COLLECT_TIMEOUT = 5.0  # seconds the stats log waits for the stopping workers' figures
STOP_TIMEOUT = 75.0  # seconds a stopping worker gets (its stores close within 60) before SIGKILL
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
RELOAD_SIGNAL, DRAIN_SIGNAL = signal.SIGHUP, signal.SIGUSR2
SUPERVISOR_SIGNALS = (*_STOP_SIGNALS, RELOAD_SIGNAL, DRAIN_SIGNAL)


class WorkerProcess:
    """One worker's seat, and the process in it now; started again when it dies."""

    def __init__(self, seat: WorkerSeat, command: Sequence[str], env: dict[str, str]) -> None:
        self.seat = seat
        self._command = list(command)
        self._env = {**env, WORKER_ENV: seat.environment_value()}
        self.process: trio.Process | None = None
        self.ready = trio.Event()  # its first process printed the ready line, or failed
        self.start_failure: StartupError | None = None
        self.ready_line = ""
        self.starts = 0
        self.stopping = False  # a stop or a drain: its end is not a death
        self.ended = trio.Event()

    @property
    def index(self) -> int:
        return self.seat.index

    async def keep_running(self) -> None:
        deaths_in_a_row = 0
        try:
            while True:
                began = trio.current_time()
                code = await self._run_once()
                if self.stopping:
                    return
                if not self.ready.is_set():
                    self.start_failure = StartupError(
                        f"worker {self.index} could not start (exit code {code})")
                    self.ready.set()  # the supervisor waits for it: it stops the others
                    return
                if trio.current_time() - began >= STEADY_RUN:
                    deaths_in_a_row = 0
                delay = RESTART_DELAYS[min(deaths_in_a_row, len(RESTART_DELAYS) - 1)]
                deaths_in_a_row += 1
                log.warning("worker %d (pid %s) ended: %s; starting it again in %g s",
                            self.index, self.process.pid if self.process else "?",
                            _exit_reason(code), delay)
                await trio.sleep(delay)
        finally:
            self.ended.set()

    async def _run_once(self) -> int:
        process = await trio.lowlevel.open_process(
            self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            pass_fds=(self.seat.listening_fd,), env=self._env,
        )
        self.process = process
        self.starts += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_output, process)
                code = await process.wait()
            return code
        finally:
            # Ends the worker's tie (its stdin) if the supervisor is cancelled.
            if process.stdin is not None:
                with trio.CancelScope(shield=True):
                    await process.stdin.aclose()

    async def _read_output(self, process: trio.Process) -> None:
        """The worker's stdout: its ready line, then nothing (anything else is logged)."""
        assert process.stdout is not None
        pending = b""
        async for data in process.stdout:
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                text = line.decode("utf-8", "replace")
                if not self.ready.is_set():
                    self.ready_line = text
                    self.ready.set()
                elif process is self.process and self.starts > 1 and text == self.ready_line:
                    log.info("worker %d is serving again (pid %d)", self.index, process.pid)
                else:
                    log.info("worker %d printed: %s", self.index, text)

    def send(self, signum: int) -> None:
        process = self.process
        if process is not None and process.returncode is None:
            try:
                process.send_signal(signum)
            except ProcessLookupError:
                pass

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT; returns once it has ended."""
        self.stopping = True
        self.send(signal.SIGTERM)
        with trio.move_on_after(STOP_TIMEOUT):
            await self.ended.wait()
            return
        log.error("worker %d did not stop within %g s: killed", self.index, STOP_TIMEOUT)
        self.send(signal.SIGKILL)
        await self.ended.wait()


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def worker_command(serve_args: Sequence[str]) -> list[str]:
    """`smp-router serve ARGS` as this very program: the same interpreter and sys.path."""
    return [sys.executable, "-m", "router.server", "serve", *serve_args]


def worker_environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
    return env


async def bind_shared_listener(config: RouterConfig) -> socket.socket:
    with naming_address("the router", config.host, config.port):
        listening = await bind_listening_socket(config.host, config.port)
    listening.set_inheritable(True)
    return listening


@contextmanager
def run_identity(data_dir: Path | None) -> Iterator[Path | None]:
    """The router's identity, made here, once: workers started together would each make
    one of their own. Without a data directory it is kept for this run in a private
    temporary directory (yielded, for the workers), removed when the router ends."""
    if data_dir is not None:
        load_or_create_identity(data_dir)
        yield None
        return
    directory = Path(tempfile.mkdtemp(prefix="smp-router-identity-"))  # mode 0700
    try:
        load_or_create_identity(directory)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def supervise(
    config: RouterConfig,
    serve_args: Sequence[str],
    reload: Callable[[], object],
    *,
    command: Sequence[str] | None = None,
) -> None:
    """Run `config.workers` workers behind one listening socket until a stop signal,
    or until every worker has ended after a drain."""
    with run_identity(config.data_dir) as identity_dir, \
            trio.open_signal_receiver(*SUPERVISOR_SIGNALS) as signals:
        listening = await bind_shared_listener(config)
        with listening:
            command = worker_command(serve_args) if command is None else command
            env = worker_environment()
            if identity_dir is not None:
                env[IDENTITY_ENV] = str(identity_dir)
            workers = [
                WorkerProcess(WorkerSeat(Ownership(config.workers, i), listening.fileno()),
                              command, env)
                for i in range(config.workers)
            ]
            async with trio.open_nursery() as nursery:
                # The router's caps on connections, asked by every worker (admission.py).
                group = group_of_supervisor(os.getpid())
                admission = await nursery.start(serve_router_admission, group, config)
                for worker in workers:
                    nursery.start_soon(worker.keep_running)
                for worker in workers:
                    await worker.ready.wait()
                failure = next((w.start_failure for w in workers if w.start_failure), None)
                if failure is not None:
                    await _stop_all(workers)
                    raise failure
                log.info("%d workers serving, pids %s", len(workers),
                         " ".join(str(w.process.pid) for w in workers if w.process))
                operated = SupervisedRouter(config, group, workers, admission)
                await start_router_ports(nursery, operated)
                figures = None
                if config.stats_log is not None:  # one log for the router (stats.py)
                    figures = await nursery.start(run_stats_log, config.stats_log,
                                                  config.stats_interval, len(workers),
                                                  operated.ask_all)
                print(workers[0].ready_line, flush=True)
                nursery.start_soon(_end_when_all_ended, workers, nursery.cancel_scope)
                await _answer_signals(signals, workers, reload, operated)
                if figures is not None:  # the workers' counts since the last collection
                    with trio.move_on_after(FINAL_COLLECT_TIMEOUT):
                        await figures.collect_final()
                await _stop_all(workers)
                nursery.cancel_scope.cancel()


async def _stop_all(workers: list[WorkerProcess]) -> None:
    with trio.CancelScope(shield=True):
        async with trio.open_nursery() as stopping:
            for worker in workers:
                stopping.start_soon(worker.stop)


async def _end_when_all_ended(workers: list[WorkerProcess], scope: trio.CancelScope) -> None:
    for worker in workers:
        await worker.ended.wait()
    log.info("stopping: every worker has ended")
    scope.cancel()


def _reload_budgets(operated: SupervisedRouter, new: RouterConfig) -> None:
    """SIGHUP: NEW budgets changed in `new` start at their new size, as in each worker
    (core/commands.py); unchanged, the buckets keep their tokens."""
    admission = operated.admission
    budgets: RouterBudgets | None = getattr(admission, "budgets", None)
    if admission is not None and budgets is not None and \
            new_queue_limits(new) != budgets.settings:
        admission.budgets = RouterBudgets(new)  # type: ignore[attr-defined]


async def _answer_signals(
    signals: AsyncIterator[int], workers: list[WorkerProcess],
    reload: Callable[[], object],
    operated: SupervisedRouter | None = None,
) -> None:
    """Pass each signal on to every worker; return on a stop signal."""
    async for signum in signals:
        if signum == RELOAD_SIGNAL:
            try:
                reloaded = reload()  # the supervisor's own log file, opened again
            except Exception as e:  # noqa: BLE001 - each worker logs the error itself
                log.error("SIGHUP: the supervisor's log was not reopened: %s", e)
            else:
                new = getattr(reloaded, "config", None)
                if operated is not None and isinstance(new, RouterConfig):
                    _reload_budgets(operated, new)
                    operated.reload_passwords(new)
            log.info("SIGHUP: passed on to %d workers", len(workers))
        elif signum == DRAIN_SIGNAL:
            log.info("draining on SIGUSR2: passed on to %d workers", len(workers))
            for worker in workers:
                worker.stopping = True  # a drained worker ends, and is not started again
        else:
            log.info("stopping on %s: passing it on to %d workers",
                     signal.Signals(signum).name, len(workers))
            return
        for worker in workers:
            worker.send(signum)

