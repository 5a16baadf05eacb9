"""The test suite's ``microagg`` command, started by forking.

Every ``microagg`` process spends about 1.5 s of a core importing pandas, Dask, Numba and microagg
before it reads an argument, and the suite starts hundreds of them. This server (one per pytest
process, ``conftest.microagg_cli``) imports all that once, then forks a child per command: the child
sets the test's environment, directory, umask and arguments, points its standard streams at the caller's
files, and runs the console script's own function (``cli.console``), which leaves with its exit code as
the real command does. Fresh process state for every command, without the imports.

Protocol on the server's standard streams, one JSON line each way: the request
``{"argv", "env", "cwd", "umask", "out", "err"}``, then the answers ``{"pid"}`` (so the caller can kill a child
past its timeout) and ``{"code"}``, the child's exit status as ``subprocess`` gives it. The server
forks only while it runs no Python thread and no thread beyond those its imports started (the C
libraries' own: OpenBLAS's and jemalloc's, which prepare for a fork themselves, and may not come back
after one); it says ``{"refused"}`` otherwise, and the caller starts the command as a plain subprocess.
"""
import json
import os
import sys
import threading

import dask.dataframe  # noqa: F401  (what every command loads)
import distributed  # noqa: F401
import pyarrow.parquet  # noqa: F401

from microagg.jobs import cli


def _threads():
    """The threads of this process (the operating system's: Python's and the C libraries')."""
    return len(os.listdir("/proc/self/task"))


def serve(threads):
    """Answer requests until the caller closes the pipe; returns a request in the forked child."""
    channel_in, channel_out = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # the server's own streams: nothing reads or writes them but the children
    os.dup2(devnull, 1)
    for line in channel_in:
        request = json.loads(line)
        if threading.active_count() != 1 or _threads() > threads:
            channel_out.write(json.dumps({"refused": f"{_threads()} threads"}) + "\n")
            continue
        pid = os.fork()
        if pid == 0:
            channel_in.close()
            channel_out.close()
            return request
        channel_out.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        channel_out.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
    sys.exit(0)


def run(request):
    """In the child: the command as its console script runs it."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os.umask(request["umask"])  # the modes of the files it writes, as the caller's child would have them
    for fd, path in ((1, request["out"]), (2, request["err"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = list(request["argv"])
    cli.console()


if __name__ == "__main__":
    print(json.dumps({"ready": True}), flush=True)
    run(serve(_threads()))
