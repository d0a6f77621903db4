"""Who owns a dump folder: the run id every rank of one launch shares, a per-rank lock held while a
rank records, and the clean-up of an older run's files (docs/FORMAT.md, "Runs").

A dump belongs to one run. Segment names carry the run id, so overwriting removes the old run's
files of every rank (never the files of ranks of this run, which may be writing concurrently), and
the reader refuses a folder that still mixes runs.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import socket
import stat
import time
import uuid

from inkling_probe.errors import DumpError
from inkling_probe.store import schema


def run_id(env, world_size: int, explicit: str = "", launch: str = "") -> str:
    """12 hex digits naming this launch, equal on every rank of it, whatever process tree runs them.

    From the first of: ``INKLING_PROBE_RUN`` (``explicit``); torchrun's ``TORCHELASTIC_RUN_ID``;
    Slurm's job and step; ``launch``, a token the ranks agreed on through the launch's own rendezvous
    (the recorder takes it from torch.distributed's store when the process group is up); for a world
    of several ranks on one host, the login session (``getsid``: shared by ranks that each run under
    their own ``timeout`` or subshell, unlike their parent or process group) with the rendezvous
    address. A lone process gets a fresh random id. The world size is part of the id.
    """
    source = f"user:{explicit}" if explicit else launcher_identity(env)
    if not source and launch:
        source = f"rendezvous:{launch}"
    if not source and world_size > 1:
        sid = os.getsid(0)
        source = (f"session:{socket.gethostname()}:{sid}:{_start_time(sid)}:"
                  f"{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}")
    if not source:
        return uuid.uuid4().hex[:12]
    return hashlib.sha256(f"{source}:{world_size}".encode()).hexdigest()[:12]


def launcher_identity(env) -> str:
    """The launcher's own name for this launch (torchrun's run id, Slurm's job and step), or ''."""
    if env.get("TORCHELASTIC_RUN_ID", "none") not in ("", "none"):
        return f"torchrun:{env['TORCHELASTIC_RUN_ID']}"
    if env.get("SLURM_JOB_ID"):
        return f"slurm:{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '')}"
    return ""


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks (so a reused pid is a different launcher)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


class RankLock:
    """An exclusive ``flock`` on ``rankNNNNN.lock`` for as long as this rank records."""

    def __init__(self, folder: str, rank: int, run: str):
        self.path = os.path.join(folder, schema.lock_name(rank))
        self.fd = _open_no_follow(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 200, 0).decode(errors="replace").split()
            os.close(self.fd)
            pid = f" (pid {holder[1]})" if len(holder) > 1 else ""
            raise DumpError(f"{folder}: rank {rank} is being recorded by another process{pid}; "
                            "record into another folder") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{run} {os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing drops the flock
            self.fd = -1


def _open_no_follow(path: str, flags: int) -> int:
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise DumpError(f"{path}: is a symbolic link; inkling-probe does not write through links") from None
        raise DumpError(f"{path}: {e.strerror}") from None


def prepare(folder: str, rank: int, run: str, overwrite: bool) -> RankLock:
    """Create ``folder``, lock this rank, and refuse (or with ``overwrite`` remove) what is in the way:
    this rank's files of any run and every rank's files of other runs. Returns the held lock."""
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise DumpError(f"{folder}: exists and is not a directory")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise DumpError(f"{folder}: can't create the dump folder ({e.strerror})") from None
    lock = RankLock(folder, rank, run)
    try:
        stale = _in_the_way(folder, rank, run)
        if stale and not overwrite:
            raise DumpError(f"{folder}: already holds a dump ({len(stale)} files of rank {rank} or of "
                            "another run); choose another path or set INKLING_PROBE_OVERWRITE=1")
        _refuse_running_ranks(folder, stale, run)
        for name in stale:
            _remove_stale(os.path.join(folder, name))
    except BaseException:
        lock.release()
        raise
    return lock


def _remove_stale(path: str) -> None:
    """Remove an older run's segment; anything but a file or link named like one is left alone."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return  # another rank of this launch removed it first
    if stat.S_ISDIR(st.st_mode):
        raise DumpError(f"{path}: a directory named like a segment; INKLING_PROBE_OVERWRITE removes "
                        "only files: move it away or record into another folder")
    try:
        os.remove(path)  # a link itself, never what it points to
    except FileNotFoundError:
        pass
    except OSError as e:
        raise DumpError(f"{path}: can't remove the older run's file ({e.strerror})") from None


def _in_the_way(folder: str, rank: int, run: str) -> list[str]:
    out = []
    for name in sorted(os.listdir(folder)):
        parsed = schema.parse_segment_name(name)
        if parsed is not None and (parsed[0] == rank or parsed[2] != run):
            out.append(name)
    return out


def _refuse_running_ranks(folder: str, stale: list[str], run: str) -> None:
    """Another run's rank that still holds its lock is recording: don't pull its files away."""
    for rank in sorted({schema.parse_segment_name(n)[0] for n in stale}):
        path = os.path.join(folder, schema.lock_name(rank))
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if _held_by_another_run(fd, run):
                raise DumpError(f"{folder}: rank {rank} of another run is still recording there; "
                                "wait for it or record into another folder")
        finally:
            os.close(fd)


def _held_by_another_run(fd: int, run: str, settle_s: float = 1.0) -> bool:
    """Is the lock held, and not by a rank of ``run``? A rank of this launch that has just taken the
    lock writes its run id a moment later: a held lock still naming another run is read again for up
    to ``settle_s`` before it counts as another run's."""
    deadline = time.monotonic() + settle_s
    while True:
        if os.pread(fd, 200, 0).decode(errors="replace").startswith(run + " "):
            return False  # our own lock (this process) or a rank of this run
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False  # nobody holds it: a finished run's lock
        except BlockingIOError:
            if time.monotonic() > deadline:
                return True
            time.sleep(0.01)
