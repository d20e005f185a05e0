"""A process's end without the interpreter's finalization.

With torch and the suite imported, finalization (module teardown, the last garbage collections) takes about 1 s
on 2 cores, in the launcher and in each worker, after the record is written: 2-3 s of every run's launch. What
finalization would do that matters has been done: atexit's callbacks run, the standard streams are flushed, and
gloo's threads have ended (suite/run/train.py) and every file written is closed (suite/atomic.py).
"""

import atexit
import logging
import os
import sys


def leave(code: int | None) -> None:
    """Exit with `code` (None: 0) after atexit's callbacks and the streams' flush, skipping finalization."""
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(0 if code is None else code)
