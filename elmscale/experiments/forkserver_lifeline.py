"""Imported first by the piece pool's forkserver (a preload module): the forkserver ends
when the command that started it does, SIGKILL included.

The forkserver would end by itself once every process holding its "alive" pipe has closed
it, but the piece workers it forks hold that pipe too (so that they could start children
of their own): a killed command left the forkserver and its workers running until their
pieces ended.  Each worker now ends with the command (``elmscale.experiments.isolation``)
and the forkserver watches its parent (:func:`elmscale.core.lifeline.watch_parent`; a
thread polling, as the forkserver may have been started from any thread of the command,
and ``PR_SET_PDEATHSIG`` fires when that thread ends).

Importing it anywhere else does nothing.
"""

import os
import sys

from elmscale.core.lifeline import watch_parent


def _in_forkserver() -> bool:
    """Whether this import runs inside ``multiprocessing.forkserver.main`` (its preload)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith(
            os.path.join("multiprocessing", "forkserver.py")
        ):
            return True
        frame = frame.f_back
    return False


if _in_forkserver():
    watch_parent()
