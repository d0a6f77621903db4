"""The drain: hands staged tensors (staging.py, step_batch.py) to the writer in order, once their
copies have completed, from a thread of its own or from the recording thread."""
from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Protocol

from inkling_probe.errors import DumpError
from inkling_probe.recorder.cudart import _stream_key
from inkling_probe.store.batch import once as _once

_STOP = object()


class Writer(Protocol):
    """What a drain hands tensors to (recorder/host_writer.py's HostWriter): called from the drain
    thread, or from the recording thread where there is none."""

    def write(self, row: dict, host, done, stats) -> None:
        """Encode host tensor ``host`` and hand it over under ``row``; ``done()`` once it is no longer
        needed. ``stats``: computed already (a dict), or None."""

    def write_batch(self, rows: list, host, spans: list, row_stats, done) -> None:
        """A sealed batch (step_batch.py) in one call: ``spans`` (offset, numel, shape) place its
        tensors in ``host``; ``row_stats``: numpy [4, m] of step_batch.row_stats, or None. ``done()``
        once, also when it fails."""

    def free_slot(self, view) -> None:
        """A ring slot that was taken but never queued (interrupted): its space goes back."""


class Drain:
    """Hands staged tensors to the writer; its first failure is kept for the caller.

    With a :class:`StepBatch`, float32 and bf16 tensors are gathered into batches, one open batch a
    dtype (a float32 router probe between bf16 activations does not cut the bf16 batch short); the
    writer gets tensors out of probe order (the reader orders them by their ``seq``), and every
    tensor of a step before ``flush()`` returns.

    ``threaded``: a thread waits for each copy and hands it over (the inline writer, whose hand-over
    writes). Otherwise (the process writer, whose hand-over is a short message) the recording thread
    hands over, at each probe, what has finished copying (a non-blocking event query), and the rest
    at ``flush()``: no second Python thread contends for the GIL with the model's launching thread,
    and the launching thread is never switched out for it (each switch costs it more than the
    hand-over: scripts/profile_record_cuda.py). A stager waiting for ring space or pinned memory
    asks the drain that empties it (:meth:`relieve`, :meth:`cancelled`), since nothing else would
    free any.
    """

    def __init__(self, stager, writer: Writer, batch=None, threaded: bool = True):
        self.stager = stager
        self._writer = writer
        self.batch = batch  # a StepBatch (step_batch.py), or None; decides what is batched; open batches are its siblings
        self._open: dict = {}  # dtype -> the open StepBatch of that dtype
        self.error: BaseException | None = None
        if threaded:
            self._queue: queue.Queue = queue.Queue()
            self._thread = threading.Thread(target=self._run, name="inkling-probe-drain", daemon=True)
            self._thread.start()
        else:
            self._items: deque = deque()
            self._thread = None
            self._pumping = False
        drained_by = getattr(stager, "drained_by", None)  # a stager with room to wait for
        if drained_by is not None:
            drained_by(self)

    def relieve(self) -> None:
        """(The stager, waiting for room) Hand over everything queued: without a drain thread nothing
        else would, and the writer frees room only for what it was sent."""
        if self._thread is None:
            self._pump(block=True)

    def cancelled(self) -> BaseException | None:
        """(The stager, waiting for room) The drain's failure, if any: nothing is sent after it, so
        the room waited for never comes."""
        return self.error

    def put(self, row: dict, t) -> None:
        """Queue ``t`` (a device tensor) for writing under ``row``."""
        try:
            self._put(row, t)
        except BaseException:  # e.g. Ctrl-C between taking a ring slot and queueing it: free the slot
            self._forget_unqueued()
            raise
        if self._thread is None and self._items:
            self._pump(block=False)

    def _forget_unqueued(self) -> None:
        unqueued = getattr(self.stager, "unqueued", None)
        while unqueued:
            self._push(("free", unqueued.pop()))  # after anything queued: sent ones are skipped

    def _push(self, item) -> None:
        if self._thread is None:
            self._items.append(item)
        else:
            self._queue.put(item)

    def _enqueue(self, item) -> None:
        self._push(item)
        unqueued = getattr(self.stager, "unqueued", None)
        if unqueued:
            unqueued.clear()

    def _put(self, row: dict, t) -> None:
        batch = self.batch
        if batch is not None and batch.takes(t):
            open_ = self._open.get(t.dtype)
            if open_ is None:
                open_ = self._open[t.dtype] = batch.sibling()
            key = _stream_key(t)  # once a probe (fits and append both need it)
            if not open_.fits(t, key):
                self._seal(open_)
            open_.append(row, t, key)
            return
        if batch is not None and batch.takes_alone(t):  # e.g. the logits: one copy, stats on the device
            alone = type(batch)(self.stager, capacity=t.numel(), stats=batch.stats)  # a StepBatch
            alone.append(row, t)
            self._enqueue(("batch", *alone.seal()))
            return
        host, token = self.stager.stage(t)
        self._enqueue(("one", row, host, token))

    def _seal(self, batch) -> None:
        if len(batch):
            self._enqueue(("batch", *batch.seal()))

    def flush(self) -> None:
        """Wait until everything queued so far is with the writer; re-raise a drain failure."""
        try:
            for batch in self._open.values():
                self._seal(batch)
        except BaseException:
            self._forget_unqueued()
            raise
        if self._thread is None:
            self._pump(block=True)
        else:
            self._queue.join()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        if self._thread is None:
            self._pump(block=True)  # after a failure: each item's buffers go back (nothing is written)
            return
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self._handle(item)
            finally:
                self._queue.task_done()

    def _pump(self, block: bool) -> None:
        """(Recording thread, unthreaded) Hand over the queued items in order: those whose copies
        have finished, or with ``block`` all of them, waiting for their copies."""
        if self._pumping:  # a wait for space inside a hand-over: nothing more to hand over here
            return
        self._pumping = True
        ready = None if block else getattr(self.stager, "ready", None)  # ready(token): copied? (None: wait)
        try:
            items = self._items
            while items:
                item = items[0]
                if ready is not None and item[0] != "free" and not ready(item[3]):
                    return
                items.popleft()
                self._handle(item)
                if self.error is not None and not isinstance(self.error, Exception):
                    # Ctrl-C during a hand-over: it stops the model now; recording stops with one line
                    interrupt, self.error = self.error, DumpError(
                        "interrupted while handing staged tensors to the writer; this step is incomplete")
                    raise interrupt
        finally:
            self._pumping = False

    def _handle(self, item) -> None:
        if item[0] == "one":
            self._drain_one(*item[1:])
        elif item[0] == "free":
            self._drain_free(item[1])
        else:
            self._drain_batch(*item[1:])

    def _drain_free(self, view) -> None:
        try:
            self._writer.free_slot(view)
        except BaseException as e:  # noqa: BLE001 - kept and raised in the recording thread
            self.error = self.error or e

    def _drain_one(self, row: dict, host, token) -> None:
        done = _once(lambda: self.stager.release(token))
        try:
            self.stager.wait(token)
            if self.error is None:
                self._writer.write(row, host, done, None)
            else:
                done()
        except BaseException as e:  # noqa: BLE001 - kept and raised in the recording thread
            done()
            self.error = self.error or e

    def _drain_batch(self, rows: list, host, token, spans: list, stats) -> None:
        """Hand a sealed batch to the writer in one call; its buffers go back once it is stored."""
        done = _once(lambda: self.stager.release(token))
        try:
            self.stager.wait(token)
            row_stats = stats.numpy() if stats is not None else None  # the writer adds them up
        except BaseException as e:  # noqa: BLE001 - kept and raised in the recording thread
            self.error = self.error or e
        if self.error is not None:
            done()
            return
        try:  # from here done() is the writer's to call, also when it fails part-way (jobs may
            # still be writing tensors of the batch it took)
            self._writer.write_batch(rows, host, spans, row_stats, done)
        except BaseException as e:  # noqa: BLE001
            self.error = self.error or e
