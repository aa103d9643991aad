"""Vendor calls that a signal can stop: a TensorRT parse or build runs in a worker thread while the main thread waits.

Python runs signal handlers in the main thread only, between bytecodes; a main thread inside a C++ call that runs
for minutes (TensorRT's ``build_serialized_network``, the ONNX parser) never gets there, and a handler that ran
inside TensorRT's logger callback raised into C++, which printed the Python stack and carried on. With the call on
a worker, the main thread's wait is where SIGINT/SIGTERM/SIGHUP land, so the usual exceptions unwind the command
and its temp files at once. The call is asked to stop through ``cancel`` (TensorRT 10's progress monitor reads
it); one that does not return within ``GRACE_S`` is left running, and the process then ends with ``os._exit``
once the command has cleaned up (see ``finish``), since a C++ thread cannot be stopped from outside.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

T = TypeVar("T")
GRACE_S = 1.0  # a cancelled build returns at its next step; what is still running after this is abandoned
_abandoned = threading.Event()
_kept: List[Any] = []  # what abandoned calls still use; never freed, the process ends with os._exit


def call(fn: Callable[..., T], *args: Any, cancel: Optional[threading.Event] = None, keep: Tuple[Any, ...] = ()) -> T:
    """``fn(*args)`` on a worker thread, waited for in a way signals interrupt; its result or its exception.
    ``keep``: the objects the call uses without holding them (the parser uses the network, the build the builder):
    an abandoned call keeps them until the process ends, or unwinding the command would free them under it.
    Off the main thread (where no signal arrives) it is a plain call."""
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    outcome: Dict[str, Any] = {}
    # An Event, not Thread.join: a join interrupted by a signal's exception marks the thread as ended while it runs
    # (CPython's bpo-45274 handling releases the thread's lock), and every later join returns at once.
    done = threading.Event()

    def work() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # handed to the caller below, with its own type
            outcome["error"] = exc
        finally:
            done.set()

    try:
        # start() waits for the thread to run, and a signal can end that wait: inside the try, so it is waited for.
        threading.Thread(target=work, name=f"vendor:{getattr(fn, '__name__', 'call')}", daemon=True).start()
        while not done.wait(0.1):  # a signal's handler runs here and raises out of the loop
            pass
    except BaseException:
        if cancel is not None:
            cancel.set()
        if not done.wait(GRACE_S):
            _kept.append((fn, args, keep))
            _abandoned.set()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def abandoned() -> bool:
    """True when a vendor call was left running after a signal (the process must end with ``finish``)."""
    return _abandoned.is_set()


def finish(code: int) -> int:
    """``code``, or, when a vendor call is still running on a worker, the end of the process with it: Python's own
    exit would wait for that thread or run C++ destructors under it."""
    if _abandoned.is_set():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code
