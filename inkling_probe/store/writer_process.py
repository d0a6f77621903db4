"""A writer in its own process, so recording costs the model's process little more than a copy.

The recording process sends each tensor down a pipe (a small marshal header and, for small tensors,
the stored bytes; large ones go through a shared-memory ring, see ring.py); this process computes
statistics and hashes and writes HDF5 on another core. ``step()`` waits for the acknowledgement
that the step's segment is on disk, so completed steps are durable as before. Messages are batched
into one pipe write a few MB of tensors (a write a tensor cost the recording process ~10 us, most
of it waking this process); the batch is mirrored in the ring's message log as it grows. If the
recording process dies, this one sees end-of-file, applies the logged messages it never received,
closes the segment it holds (marked as not complete) and exits, so even the tensors of a crashed
step survive, up to the last one handed over (where there is no ring, as before, a last batch of
small tensors, under 256 KB, may be lost). A write cut part-way (Ctrl-C with the pipe full) leaves the
pipe mid-message: nothing more is sent, and closing lets the writer apply the log as after a crash.

Started by :class:`ProcessWriter` only (``python -c`` importing :func:`main` from the recording
process's own copy of the package).
"""
from __future__ import annotations

import contextlib
import io
import marshal
import select
import os
import signal
import struct
import subprocess
import sys
import time

import numpy as np

from inkling_probe.errors import DumpError
from inkling_probe.store.batch import sums_from_rows
from inkling_probe.store.ring import RingReader, RingWriter, backoff, ring_file
from inkling_probe.store.stall import Watch

_FRAME = struct.Struct("<IQ")  # header bytes, payload bytes
_PIPE_BYTES = 1 << 20
_BATCH_BYTES = 256 << 10  # small frames are copied into one buffer and sent in one system call
_RING_MIN_BYTES = 64 << 10  # payloads from this size go through the shared ring, not the pipe
_FLUSH_BYTES = 4 << 20  # ring payloads batched before the messages go down the pipe: small's forward
# on two cores (2-core machine, interleaved rounds) 1.257x -> 1.196x and 1.265x -> 1.229x of plain
# against a write a tensor; 1, 2, 8 and 16 MB within the rounds' spread of 4
_RING_BYTES = 128 << 20  # two steps of a 54 MB GPU step in flight (INKLING_PROBE_DURABILITY=writer)
_F_SETPIPE_SZ = 1031


class WriterDied(DumpError):
    """The writer process is gone; the message says why, as far as it said."""


def _warn(text: str) -> None:
    sys.stderr.write(text + "\n")


# The writer imports this very copy of inkling_probe, also where the recording process found it
# only through a sys.path entry of its own (a script run from a checkout's subfolder): the folder
# holding the package goes first on the writer's path unless it is on that path already.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOTSTRAP = ("import sys; root = sys.argv.pop(1); sys.path.insert(0, root) if root not in sys.path else None; "
              "from inkling_probe.store.writer_process import main; sys.exit(main())")


_REFS_A_MESSAGE = 256  # reference rows held before they are sent (ProcessWriter.add_ref)
# numpy's BLAS on one thread in the writer: its job threads are its parallelism, and an OpenBLAS
# pool of every core spins between the statistics' dot products (a dot of more than 10K values is
# spread over the pool). An H100 host's 16 cores, transformers' Inkling small under record(model)'s
# default: 865 -> 68 ms of writer CPU a forward, the forward 3.23x -> 2.63x of plain (bench_record_parts)
_ONE_BLAS_THREAD = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}


class ProcessWriter:
    """Main-process side: same calls as :class:`~inkling_probe.store.writer.SegmentWriter`.

    The process starts at construction (when recording is configured, so its imports overlap the
    model's start-up); :meth:`open` names the dump once the rank is known.
    """

    def __init__(self):
        env = {k: v for k, v in os.environ.items() if k != "INKLING_PROBE"}
        env.update(_ONE_BLAS_THREAD)
        self._ring_fd = ring_file(_warn)
        argv = [sys.executable, "-c", _BOOTSTRAP, _PACKAGE_ROOT]
        if self._ring_fd is not None:
            argv += [str(self._ring_fd), str(_RING_BYTES)]
        # SIGINT blocked across the exec (the writer ignores it before unblocking): a Ctrl-C during
        # its start-up stops the model only; the writer then sees end of file and keeps what it has
        with _sigint_blocked():
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                          bufsize=0, pass_fds=() if self._ring_fd is None else (self._ring_fd,))
        self._ring = None  # mapped once the writer says it reserved the space
        self._ring_pending = self._ring_fd is not None
        self._ring_claimed = False  # GPU staging fills the ring's slots; nothing else is put there
        self._fd = self._proc.stdin.fileno()
        _grow_pipe(self._fd)
        os.set_blocking(self._fd, False)  # a full pipe waits in select, watching the writer (stall.py)
        self._ring_watch: Watch | None = None
        self._batch = bytearray()  # frames not yet written to the pipe (mirrored in the ring's log)
        self._refs: list[dict] = []  # reference rows not yet sent: one message for many (add_ref)
        self._ring_bytes = 0  # ring payload bytes whose messages are in the batch
        self._number = 0  # messages sent: each carries its number ("n"), the writer the last it applied
        self._closed = False
        self._unacked = 0  # segment ends sent whose acknowledgement was not read yet
        self._torn: str | None = None  # why a write to the pipe stopped mid-message (nothing more may follow)

    def _ring_status(self, block: bool) -> None:
        """Read the writer's first line, 'ring ok SIZE' or 'ring none REASON', once it is there."""
        if not self._ring_pending or not (block or select.select([self._proc.stdout], [], [], 0)[0]):
            return
        self._ring_pending = False
        Watch(self._proc.pid, "its start").wait_fd(self._proc.stdout.fileno())
        line = self._proc.stdout.readline().decode(errors="replace").strip()
        fd, self._ring_fd = self._ring_fd, None
        if line.startswith("ring ok "):
            ring = RingWriter(fd, int(line.split()[2]))
            ring.close_fd()  # the mapping stays
            if not ring.log(self._batch, 0):  # the log mirrors the batch from its first frame
                self._flush()
            self._ring = ring
            return
        if line.startswith("ring none "):
            _warn(f"inkling-probe: {line.removeprefix('ring none ')}; large tensors go through the pipe (slower)")
        os.close(fd)

    def open(self, path, rank: int, world_size: int, **options) -> "ProcessWriter":
        self._send({"op": "open", "path": os.fspath(path), "rank": rank, "world_size": world_size, **options})
        return self

    def add(self, row: dict, array: np.ndarray, *, stats: bool | dict = True, store: bool = True,
            on_stored=None) -> None:
        """Send one tensor; its bytes are copied (ring or pipe) before this returns."""
        self._send_add(row, array, stats, store)
        if on_stored is not None:
            on_stored()

    def _send_add(self, row: dict, array: np.ndarray, stats, store: bool) -> None:
        self._send_payload({"op": "add", "row": row, "stats": stats, "store": store}, np.ascontiguousarray(array))

    def add_ref(self, row: dict) -> None:
        """Send a reference row (store/refs.py): no bytes. Held and sent with others, one message for
        up to ``_REFS_A_MESSAGE`` (the writer places references only when the segment ends, so
        the end sends those held first). A message each cost the recording thread 6.0 us a
        reference on the 2-core box, held 1.3 us; record(model)'s default sends ~195 a forward of
        transformers' Inkling small."""
        self._refs.append(row)
        if len(self._refs) >= _REFS_A_MESSAGE:
            self._send_refs()

    def _send_refs(self) -> None:
        if self._refs:
            rows, self._refs = self._refs, []
            self._send({"op": "refs", "rows": rows})

    takes_row_stats = True  # add_batch takes a batch's row statistics and adds them up itself

    def add_batch(self, rows: list, flat: np.ndarray, spans: list, sums: np.ndarray | None = None, *,
                  stats: bool = True, store: bool = True, on_stored=None, row_stats: np.ndarray | None = None,
                  row_values: int = 0) -> None:
        """Send a batch's tensors (store/batch.py) in one message: ``flat``'s bytes are copied into
        the ring (or the pipe) once, and the writer splits them; ``on_stored()`` once copied (or
        the send failed). ``row_stats``: instead of ``sums``, the batch buffer's [4, m] row statistics
        (step_batch.row_stats) over rows of ``row_values`` values, which the writer process adds up per
        tensor (store.batch.sums_from_rows) rather than the recording thread."""
        header = {"op": "batch", "rows": rows, "spans": spans, "stats": stats, "store": store,
                  "sums": None if sums is None else np.ascontiguousarray(sums, dtype=np.float64).tobytes(),
                  "row_stats": None if row_stats is None else np.ascontiguousarray(row_stats, np.float64).tobytes()}
        if row_stats is not None:
            header["row_values"] = row_values
        try:
            self._send_payload(header, np.ascontiguousarray(flat).reshape(-1))
        finally:  # copied, or never to be read: either way ``flat`` is free
            if on_stored is not None:
                on_stored()

    def _send_payload(self, header: dict, array: np.ndarray) -> None:
        """Send ``header`` with ``array`` (described in it): by position when it is a ring slot
        (filled in place), else through the ring when it fits there (unless the ring is claimed),
        else through the pipe."""
        header.update(np=array.dtype.str, shape=array.shape)
        self._ring_status(block=False)
        ring, where = self._ring, None
        if ring is not None:
            where = ring.placed(array)
            if where is None and not self._ring_claimed and _RING_MIN_BYTES <= array.nbytes <= ring.size // 2:
                where = ring.put(array, self._wait_for_ring)
        if where is not None:
            header["ring"] = (*where, array.nbytes)  # offset, start, end, bytes
            self._send(header)
            self._ring_bytes += array.nbytes
            if self._ring_claimed or self._ring_bytes >= _FLUSH_BYTES:
                self._flush()  # (a GPU slot at once: its batches are 16 MB, and the drain waits on the ring)
        else:
            self._send(header, memoryview(array).cast("B") if array.size else b"")

    def _wait_for_ring(self) -> None:
        self._flush()  # the writer can only free space for messages it has received
        self.wait_for_ring_space()

    def staging_ring(self):
        """The shared ring GPU staging may fill in place (staging.RingStager), or None when there
        is none; :meth:`claim_ring` once the staging is set up."""
        self._ring_status(block=True)
        return self._ring

    def claim_ring(self) -> None:
        """From now on only slots go through the ring (the claimer takes them in the order their
        messages are sent); other payloads go through the pipe. Messages of ring payloads still
        batched go out first: the writer frees ring space in order, so a held one would keep the
        claimer's first slot waiting for ever."""
        self._flush()
        self._ring_claimed = True

    def free_slot(self, view: np.ndarray) -> None:
        """Tell the writer a ring slot will never be sent (interrupted before it was queued), so
        its space is freed; nothing if it was sent."""
        where = self._ring.forget(view) if self._ring is not None else None
        if where is not None:
            self._send({"op": "free", "ring": (*where, 0)})
            self._flush()

    def wait_for_ring_space(self) -> None:
        """One wait for ring space (a claimer's slot): raises if the writer process is gone, or
        stopped for long (stall.py)."""
        self._flush()  # the writer can only free space for messages it has received
        if self._proc.poll() is not None:
            raise WriterDied(self._why())
        watch = self._ring_watch
        if watch is None or time.monotonic() - watch.last_call > 1.0:  # a new wait, not the same one
            watch = self._ring_watch = Watch(self._proc.pid, "space in the shared ring")
        watch.last_call = time.monotonic()
        watch.check()
        backoff()

    def end_segment(self, complete_through_step: int, wait: bool = True) -> None:
        """End the segment: its files are renamed into place when this returns. With ``wait=False``
        this returns once the end is sent (the writer process holds every tensor before it), after
        the acknowledgement of any earlier end: at most one segment end is in flight."""
        self._acks_due()
        self._send_refs()
        self._send({"op": "end", "step": complete_through_step})
        self._flush()
        self._unacked += 1
        if wait:
            self._acks_due()

    def close(self, complete_through_step: int) -> None:
        if self._closed:
            return
        self._closed = True
        if self._torn is not None:  # the writer keeps what was handed over and ends the segment at EOF
            self.abandon()
            self._check_torn()
        self._acks_due()
        self._send_refs()
        self._send({"op": "close", "step": complete_through_step})
        self._flush()
        self._unacked += 1
        self._acks_due()
        self._proc.stdin.close()
        self._proc.wait()
        if self._ring is not None:
            self._ring.close()
        if self._ring_fd is not None:
            os.close(self._ring_fd)
            self._ring_fd = None

    def abandon(self) -> None:
        """After a failure: let the process go (it sees end of file) without waiting on it."""
        self._closed = True
        try:
            self._proc.stdin.close()
        except OSError:
            pass

    def _send(self, header: dict, payload=b"") -> None:
        self._check_torn()
        self._number += 1
        header["n"] = self._number
        head = marshal.dumps(header)
        frame = _FRAME.pack(len(head), len(payload))
        if len(payload) < _BATCH_BYTES:
            at = len(self._batch)
            self._batch += frame
            self._batch += head
            self._batch += payload
            if len(self._batch) >= _BATCH_BYTES or not self._logged(at):
                self._flush()
        else:
            self._flush()
            self._write([frame, head, payload])

    def _logged(self, at: int) -> bool:
        """Mirror the batch's frames from byte ``at`` in the ring's log; False when they don't fit."""
        if self._ring is None:
            return True
        with memoryview(self._batch) as view:
            return self._ring.log(view[at:], at)

    def _flush(self) -> None:
        self._ring_bytes = 0
        if self._batch:
            batch, self._batch = self._batch, bytearray()
            self._write([batch])
            if self._ring is not None:
                self._ring.clear_log()  # (only once written: a kill mid-write leaves it logged)

    def _check_torn(self) -> None:
        if self._torn is not None:
            raise DumpError(f"a write to the writer process stopped part-way ({self._torn}); it keeps what was "
                            "handed over and closes the segment as after a crash")

    def _write(self, parts) -> None:
        """Write ``parts`` to the pipe; if that stops part-way (Ctrl-C while the pipe is full, the
        writer gone), the pipe may end mid-message, so nothing more is sent or logged: the log keeps
        the batch, and the writer applies it at end-of-file (``close`` and ``abandon`` give it that)."""
        try:
            _write_all(self._fd, parts, lambda: Watch(self._proc.pid, "room in the pipe to it"))
        except BaseException as e:
            self._torn = type(e).__name__ if not str(e) else f"{type(e).__name__}: {e}"
            if isinstance(e, OSError):  # (BrokenPipeError included)
                raise WriterDied(self._why()) from None
            raise

    def wait_for_ends(self) -> None:
        """Return once every segment end sent so far is on disk (acknowledged by the writer)."""
        self._acks_due()

    def _acks_due(self) -> None:
        """Wait for the writer's acknowledgement of every segment end sent so far."""
        if self._unacked:
            self._check_torn()  # (the writer waits for the rest of a message: no acknowledgement comes)
        while self._unacked:
            self._unacked -= 1
            self._ack()

    def _ack(self) -> None:
        self._ring_status(block=True)
        Watch(self._proc.pid, "the step's acknowledgement (on disk)").wait_fd(self._proc.stdout.fileno())
        line = self._proc.stdout.readline().decode().strip()
        if line != "ok":
            raise WriterDied(line.removeprefix("err ") if line else self._why())

    def _why(self) -> str:
        self._ring_status(block=True)
        line = ""
        while self._proc.stdout:  # acknowledgements not yet read come first
            line = self._proc.stdout.readline().decode().strip()
            if line != "ok":
                break
        code = self._proc.wait()
        return line.removeprefix("err ") or f"inkling-probe writer process exited with code {code}"


@contextlib.contextmanager
def _sigint_blocked():
    mask = getattr(signal, "pthread_sigmask", None)
    old = mask(signal.SIG_BLOCK, {signal.SIGINT}) if mask else None
    try:
        yield
    finally:
        if mask:
            mask(signal.SIG_SETMASK, old)


def _grow_pipe(fd: int) -> None:
    try:
        import fcntl
        fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_BYTES)
    except (ImportError, OSError):
        pass  # a smaller pipe only means the recording process waits on the writer sooner


def _write_all(fd: int, parts, watch=None) -> None:
    """Write every byte of ``parts`` to the (non-blocking) ``fd``; while it is full, wait in
    ``watch()``'s ``wait_fd`` (one :class:`~inkling_probe.store.stall.Watch` for the whole write)."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    waiting = None
    while views:
        try:
            n = os.writev(fd, views)
        except BlockingIOError:
            waiting = waiting or (watch() if watch is not None else None)
            if waiting is None:
                select.select([], [fd], [])
            else:
                waiting.wait_fd(fd, write=True)
            continue
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if views and n:
            views[0] = views[0][n:]


# -- the writer process ------------------------------------------------------------------------
def _read_exact(stream, n: int) -> bytes | None:
    data = stream.read(n)
    return data if data is not None and len(data) == n else None


def _read_message(stdin):
    """(header, payload), or (None, None) at end of file, also one that cuts a message short."""
    frame = _read_exact(stdin, _FRAME.size)
    if frame is None:
        return None, None
    head_len, payload_len = _FRAME.unpack(frame)
    head = _read_exact(stdin, head_len)
    payload = _read_exact(stdin, payload_len) if payload_len else b""
    if head is None or payload is None:
        return None, None
    return marshal.loads(head), payload


def serve(stdin, stdout, ring=None) -> int:
    """Apply framed messages from ``stdin`` to a SegmentWriter until close or end-of-file; after a
    failure the open segment is abandoned quietly (its ``.tmp`` stays) and the error raised.
    At end-of-file (the recording process is gone, maybe mid-message) the messages in the ring's log
    that were not applied yet are applied, and the open segment is closed: what was handed over is kept."""
    from inkling_probe.store.writer import SegmentWriter

    writer, done, applied = None, -1, 0
    try:
        while True:
            msg, payload = _read_message(stdin)
            if msg is None:
                return _at_end_of_file(stdout, ring, writer, done, applied, SegmentWriter)
            applied = msg.get("n", applied)
            writer, done, finished = _apply(msg, payload, stdout, ring, writer, done, SegmentWriter)
            if finished:
                return 0
    except BaseException:
        if writer is not None:
            writer.abort()
        raise


def _at_end_of_file(stdout, ring, writer, done, applied: int, SegmentWriter) -> int:
    """Apply the logged messages numbered after ``applied`` (the batch the recording process had not
    written out when it went), then end the open segment, complete through step ``done``."""
    logged = io.BytesIO(ring.logged() if ring is not None else b"")
    try:
        while True:
            msg, payload = _read_message(logged)
            if msg is None:
                break
            if msg.get("n", 0) > applied:
                writer, done, finished = _apply(msg, payload, stdout, ring, writer, done, SegmentWriter)
                if finished:
                    return 0
    except Exception as e:  # noqa: BLE001 - what the pipe delivered is kept all the same
        _warn(f"inkling-probe: the writer process could not apply the recording's last messages ({e}); "
              "the segment keeps what came before them")
    if writer is not None:
        writer.end_segment(complete_through_step=done)
    return 0


def _apply(msg: dict, payload, stdout, ring, writer, done, SegmentWriter):
    """Apply one message: (writer, last completed step, finished?)."""
    op = msg["op"]
    if op in ("add", "batch"):
        where = msg.get("ring")  # (offset, start, end, bytes), or None: the bytes are the payload
        if where is None:
            array = np.frombuffer(payload, dtype=np.dtype(msg["np"])).reshape(msg["shape"])
        else:
            array = ring.view(where[0], where[3], msg["np"], msg["shape"])
        # the ring's space is free again once add() (or its job) has copied or written the data
        on_stored = _owned if where is None else ring.pending(where[1], where[2])
        if op == "add":
            writer.add(msg["row"], array, stats=msg["stats"], store=msg["store"], on_stored=on_stored)
        else:
            sums = _batch_sums(msg)
            writer.add_batch(msg["rows"], array, msg["spans"], sums, stats=msg["stats"], store=msg["store"],
                             on_stored=on_stored)
    elif op == "refs":
        for row in msg["rows"]:
            writer.add_ref(row)
    elif op == "free":  # a slot that was never filled: its space only
        where = msg["ring"]
        ring.pending(where[1], where[2])()
    elif op == "open":
        args = {k: v for k, v in msg.items() if k not in ("op", "n", "path", "rank", "world_size")}
        writer = SegmentWriter(msg["path"], msg["rank"], msg["world_size"], **args)
    elif op in ("end", "close"):
        if writer is not None:
            writer.end_segment(complete_through_step=msg["step"])
        done = msg["step"]
        _say(stdout, "ok")
        return writer, done, op == "close"
    return writer, done, False


def _batch_sums(msg: dict) -> np.ndarray | None:
    """A batch message's [k, 5] statistics sums: sent as they are, or added up here from the
    buffer's row statistics; None when it carries neither."""
    if msg.get("row_stats") is not None:
        return sums_from_rows(np.frombuffer(msg["row_stats"], dtype=np.float64).reshape(4, -1), msg["spans"],
                              msg["row_values"])
    return None if msg["sums"] is None else np.frombuffer(msg["sums"], dtype=np.float64).reshape(-1, 5)


def _owned() -> None:
    """The on_stored of a pipe payload: its bytes belong to the message, nothing to free."""


def _open_ring(args, stdout):
    """Reserve and map the inherited ring; tell the recording process the outcome in one line."""
    if len(args) < 2:
        return None
    try:
        ring = RingReader(int(args[0]), int(args[1]))
        _say(stdout, f"ring ok {ring.size}")
    except OSError as e:
        ring = None
        _say(stdout, f"ring none {e}")
    return ring


def _say(stdout, line: str) -> None:
    """One line to the recording process; if it has gone, carry on (what it sent is still kept)."""
    try:
        stdout.write(line.replace("\n", " ").encode() + b"\n")
        stdout.flush()
    except OSError:
        null = os.open(os.devnull, os.O_WRONLY)  # nothing left to flush into a dead pipe at exit
        os.dup2(null, stdout.fileno())
        os.close(null)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the model; we finish the segment
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by the parent across exec
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file size limit: an error, not a kill
    try:
        ring = _open_ring(sys.argv[1:], sys.stdout.buffer)
        return serve(sys.stdin.buffer, sys.stdout.buffer, ring)
    except Exception as e:  # report one line to the recording process, then exit
        text = str(e) if isinstance(e, DumpError) else f"inkling-probe writer: {type(e).__name__}: {e}"
        _say(sys.stdout.buffer, f"err {text}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
