"""Keep the worker's secrets out of reach of the tasks it runs.

A task runs as the worker's own user (uid 10001 in the image), and a process may read the
environment and the memory of any process of its user: ``/proc/<pid>/environ`` and
``/proc/<pid>/mem``. The worker's environment holds ``WORKER_BOOTSTRAP_TOKEN``, the
credential that registers workers, and its memory the per-worker token. Two steps:

- ``make_undumpable``: ``prctl(PR_SET_DUMPABLE, 0)``. The kernel then refuses this
  process's ``environ``, ``mem``, ``fd``, ``maps`` … and ptrace to every process without
  CAP_SYS_PTRACE (containers drop it), its own user included. All its threads share the
  flag; a child gets ``dumpable`` back when it execs its program, so a task's processes
  stay as they were, only the worker is closed. The image's interpreter is
  execute-only for the same reason (03-agents/Dockerfile): the kernel makes a process
  that runs a program its user cannot read non-dumpable from its first instruction,
  which covers the window before this call and the healthcheck's processes.
- ``forget_env``: a name leaves ``os.environ`` and the process's original environment
  block, what ``/proc/<pid>/environ`` shows (``unsetenv`` only unlinks it from the list,
  the bytes stay), so nothing that reads either later finds it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

from airig.common.errors import ConfigError

log = logging.getLogger("airig.worker")
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def make_undumpable() -> None:
    """Close this process's /proc files and ptrace to its own user (Linux only; the worker
    runs tasks nowhere else). A kernel that refuses is a worker that must not run tasks."""
    if not sys.platform.startswith("linux"):
        log.warning("not Linux: tasks may read this worker's environment")
        return
    libc = _libc()
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0):
        raise ConfigError(
            f"cannot make the worker non-dumpable: {os.strerror(ctypes.get_errno())}",
            "run the worker on Linux; tasks could read its tokens otherwise",
        )


def forget_env(name: str) -> None:
    """Remove ``name`` from the environment, and blank its value where the kernel shows it."""
    prefix = name.encode() + b"="
    if sys.platform.startswith("linux"):
        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(_libc(), "environ")
        index = 0
        while (entry := environ[index]) is not None:
            text = ctypes.string_at(entry)
            if text.startswith(prefix):
                ctypes.memset(entry + len(prefix), 0, len(text) - len(prefix))
            index += 1
    os.environ.pop(name, None)
