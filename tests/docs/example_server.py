"""Run example scripts each in a process of its own, forked from one that imported
their heavy dependencies (torch, BoTorch, Ax) once.

``python examples/NAME.py`` pays several seconds of CPU for those imports before it
does anything; a test run runs every example. This server imports them once, then
forks one child per request: the child runs the script as ``__main__`` (as
``python PATH ARGS`` would: its folder first on ``sys.path``, ``sys.argv`` set), in
the request's working directory, with its output in the request's log file, and
ends with the script's exit status. Nothing of one example reaches the next.

Protocol: one JSON request per line on stdin, ``{"path", "argv", "cwd", "log"}``;
one line back per request, the child's exit status.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading
import traceback


def _run(request: dict) -> int:
    """In the forked child: run the script; return its exit status."""
    try:
        os.chdir(request["cwd"])
        sys.argv = [request["path"], *request["argv"]]
        # As ``python PATH`` puts the script's folder first (runpy.run_path does not):
        # tune_your_job.py's workers import it by name. Only this forked child's path.
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


def main() -> None:
    import ax  # noqa: F401  the imports the examples share, paid once
    import botorch  # noqa: F401
    import torch  # noqa: F401

    import gpar_bo.ax  # noqa: F401
    import gpar_bo.tuning  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
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
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


if __name__ == "__main__":
    main()
