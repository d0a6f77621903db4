"""Bounded waits on the writer process: the recording process never waits on it without a word.

``step()`` waits for the writer's acknowledgement, a full pipe or a full ring. A writer that was
stopped (``SIGSTOP``, ``kill -STOP``, a debugger) would make those waits last for ever, silently.
Every such wait goes through a :class:`Watch`: after :data:`STOPPED_S` seconds during which the
writer process is stopped, the wait ends in a one-line :class:`WriterStalled`; a writer that runs but
has not answered for :data:`NOTICE_S` seconds (a slow disk) gets one line on stderr per wait, and the
wait goes on.
"""
from __future__ import annotations

import select
import sys
import time

from inkling_probe.errors import DumpError

STOPPED_S = 10.0
NOTICE_S = 30.0
SLICE_S = 0.5  # how often a blocked wait wakes to look at the writer

_STATES = {"R": "running", "S": "sleeping", "D": "waiting on the disk", "T": "stopped", "t": "stopped by a debugger"}


class WriterStalled(DumpError):
    """The writer process stopped answering: the message names its pid and state."""


def process_state(pid: int) -> str:
    """The one-letter state of ``pid`` from /proc ('' where it can't be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


class Watch:
    """One wait on the writer process ``pid`` for ``what`` (e.g. "the step's acknowledgement")."""

    def __init__(self, pid: int, what: str, stopped_s: float | None = None, notice_s: float | None = None):
        self.pid, self.what = pid, what
        self.stopped_s = STOPPED_S if stopped_s is None else stopped_s
        self.notice_s = NOTICE_S if notice_s is None else notice_s
        self.start = self._checked = self.last_call = time.monotonic()
        self._stopped_since: float | None = None
        self._noticed = False

    def check(self) -> None:
        """Call while waiting (cheap: looks at /proc at most every SLICE_S); raises when stopped too long."""
        now = time.monotonic()
        if now - self._checked < SLICE_S:
            return
        self._checked = now
        state = process_state(self.pid)
        if state in ("T", "t"):
            self._stopped_since = self._stopped_since or now
            if now - self._stopped_since >= self.stopped_s:
                raise WriterStalled(
                    f"the writer process (pid {self.pid}) has been {_STATES[state]} for "
                    f"{now - self._stopped_since:.0f} s while this process waited for {self.what}; "
                    f"recording stops (resume a stopped writer with kill -CONT {self.pid})")
            return
        self._stopped_since = None
        if not self._noticed and now - self.start >= self.notice_s:
            self._noticed = True
            sys.stderr.write(f"inkling-probe: waiting {now - self.start:.0f} s so far for {self.what} from "
                             f"the writer process (pid {self.pid}, {_STATES.get(state, state or 'gone')})\n")

    def wait_fd(self, fd: int, write: bool = False) -> None:
        """Block until ``fd`` is readable (writable with ``write``), checking the writer meanwhile."""
        while True:
            ready = select.select([], [fd], [], SLICE_S) if write else select.select([fd], [], [], SLICE_S)
            if ready[0] or ready[1]:
                return
            self._checked = 0.0  # a whole slice passed: look now
            self.check()
