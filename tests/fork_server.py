"""Processes forked from one that imported torch, BoTorch, Ax and this package once.

``python SCRIPT`` pays several seconds of CPU for those imports before it does anything,
and the examples and the tests that kill or race real tuning processes start many such
processes. A server, started once per test worker, imports them and then forks one child
per request. The child runs a script (as ``python PATH ARGS`` would: its folder first on
``sys.path``) or a module (as ``python -m MODULE ARGS``) as ``__main__``, in the
request's working directory, with its output in the request's log file, in a session of
its own (so that killing its process group takes its workers down too). It ends with the
script's exit status. Nothing of one child reaches the next.

Protocol: one JSON request per line on the server's stdin, ``{"path" or "module", "argv",
"cwd", "log", "request"}``. The server answers each with ``{"request":
N, "pid": PID}`` once the child runs, and says ``{"exit": PID, "code": STATUS}`` when it
ends. It reaps each child as soon as it ends (``subprocess.Popen`` keeps it until asked),
so ``Forked.kill_group`` ignores a group that is gone.
:class:`ForkServer` is the tests' side of it: ``start`` returns a :class:`Forked`, which
answers what the tests ask of a ``subprocess.Popen``.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import queue
import runpy
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Forked:
    """A child of the server: its ``pid`` and, once it ended, its ``returncode``."""

    def __init__(self, server: ForkServer, pid: int, log: Path) -> None:
        self.server, self.pid, self.log = server, pid, log
        self.returncode: int | None = None  # set by the server's reader when it ends

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status, once the child ended; ``subprocess.TimeoutExpired`` after
        ``timeout`` seconds."""
        with self.server.ended:
            ended = self.server.ended.wait_for(
                lambda: self.returncode is not None or self.server.dead, timeout)
        if self.returncode is None:
            if ended:
                raise RuntimeError(f"the fork server ended before its child {self.pid}")
            raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it ended just now
                os.kill(self.pid, sig)

    def kill_group(self) -> None:
        """SIGKILL to the child's process group (its session's): the child and whatever
        it started that is still there, if anything is."""
        with contextlib.suppress(ProcessLookupError):  # all of it ended already
            os.killpg(self.pid, signal.SIGKILL)

    def output(self) -> str:
        """What the child wrote to its log."""
        return self.log.read_text() if self.log.exists() else ""


class ForkServer:
    """The server process and the thread that reads its answers."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fork_server"], cwd=ROOT, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            start_new_session=True,  # so that a kill takes its children down too
            # One thread, as CI sets it: small GP fits are much slower on oversubscribed
            # cores. This checkout's package, not whichever one is installed (the
            # children's own fresh interpreters, e.g. multiprocessing's, inherit it).
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])},
        )
        self.dead = False  # the server ended
        self.ended = threading.Condition()  # guards the two below
        self._running: dict[int, Forked] = {}  # by pid (the server reaps: pids get reused)
        self._early: dict[int, int] = {}  # exit statuses read before start() took the pid
        self._requests = itertools.count()
        self._pids: queue.Queue[tuple[int, int] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            message = json.loads(line)
            if "pid" in message:
                self._pids.put((message["request"], message["pid"]))
            else:
                with self.ended:
                    child = self._running.pop(message["exit"], None)
                    if child is None:  # it ended before start() returned it
                        self._early[message["exit"]] = message["code"]
                    else:
                        child.returncode = message["code"]
                    self.ended.notify_all()
        with self.ended:
            self.dead = True
            self.ended.notify_all()
        self._pids.put(None)

    def start(self, *, path: Path | None = None, module: str | None = None,
              argv: list[str] = (), cwd: Path = ROOT, log: Path) -> Forked:
        """Run the script ``path`` or the module ``module`` in a forked child (see the
        module docstring); its output goes to ``log``."""
        if (path is None) == (module is None):
            raise ValueError("Give a script path or a module name.")
        if self.process.poll() is not None:
            raise RuntimeError(f"the fork server ended ({self.process.returncode})")
        number = next(self._requests)
        request = {"request": number, "argv": [str(a) for a in argv], "cwd": str(cwd),
                   "log": str(log),
                   **({"path": str(path)} if path is not None else {"module": module})}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        while True:  # the answer to this request (an earlier one may have timed out)
            answer = self._pids.get(timeout=120)
            if answer is None:
                raise RuntimeError(f"the fork server ended ({self.process.wait()})")
            if answer[0] == number:
                break
        child = Forked(self, answer[1], Path(log))
        with self.ended:
            if child.pid in self._early:
                child.returncode = self._early.pop(child.pid)
            else:
                self._running[child.pid] = child
        return child

    def close(self) -> None:
        """Kill the children still running (a failed test may leave one), then end the
        server."""
        with self.ended:
            running = list(self._running.values())
        for child in running:
            child.kill_group()
        for child in running:  # reported before the server goes
            with contextlib.suppress(subprocess.TimeoutExpired, RuntimeError):
                child.wait(timeout=10)
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


# ------------------------------------------------------------------ the server
def _run(request: dict) -> int:
    """In the forked child: run the script or module; return its exit status."""
    try:
        os.chdir(request["cwd"])
        if "module" in request:
            sys.argv = [request["module"], *request["argv"]]
            # As ``python -m`` puts the working folder first (this child's path only).
            sys.path.insert(0, request["cwd"])
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [request["path"], *request["argv"]]
            # As ``python PATH`` puts the script's folder first (runpy.run_path does not):
            # tune_your_job.py's workers import it by name (this child's path only).
            sys.path.insert(0, os.path.dirname(request["path"]))
            runpy.run_path(request["path"], run_name="__main__")
        return 0
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)  # sys.exit("message"), as Python shows it
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def _child(request: dict, ready: int) -> None:
    """The forked child's whole life: never returns. It writes to ``ready`` once it has
    its session, so that its pid is not handed out before its process group exists."""
    code = 1
    try:
        os.setsid()
        os.write(ready, b"1")
        os.close(ready)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # not the server's requests
        os.dup2(log, 1)
        os.dup2(log, 2)
        code = _run(request)
        # What interpreter exit does: join non-daemon threads, then atexit.
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    import ax  # noqa: F401  the imports the children share, paid once
    import botorch  # noqa: F401
    import torch  # noqa: F401

    import gpar_bo.ax  # noqa: F401
    import gpar_bo.tuning.loop  # noqa: F401

    # The reaper and the forks take turns on stdout: a child forked while the reaper
    # held stdout's lock would inherit it held.
    lock = threading.Lock()

    def say(message: dict) -> None:
        with lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:  # no child right now
                time.sleep(0.02)
                continue
            say({"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    threading.Thread(target=reap, daemon=True).start()
    for line in sys.stdin:
        request = json.loads(line)
        with lock:
            ready, has_session = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(ready)
                _child(request, has_session)
            os.close(has_session)
            os.read(ready, 1)  # empty if it died first: its pid is still the answer
            os.close(ready)
            sys.stdout.write(json.dumps({"request": request["request"], "pid": pid}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
