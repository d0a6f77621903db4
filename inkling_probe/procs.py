"""Child process groups: every run is a process group of its own, killed and waited for whole.

The one command runner of the toolkit: ``bisect`` runs its trials through :func:`run`, and so does
``graphdiff --run`` (its eager and graph sides). A command may start processes of its own
(``torchrun`` ranks, a writer process). :func:`run` starts each command in a new session (``setsid``:
its own process group, ``pgid == pid``), and a run is over only when no process of that group is
left: on a timeout, an interrupt or an error the whole group gets SIGKILL; after a normal exit,
members still running after a short grace get it too.

A bisect that is itself killed cannot do that; its state file then names the groups it left running
(:func:`identity`: the pgid, the leader's start time, the boot and the run's token, which every
process of the run carries in its environment as ``INKLING_BISECT_RUN``), and a resumed bisect calls
:func:`reap` on each before it runs anything; a group none of whose processes carries the token is
not ours (a reused number, or a crafted state) and is left alone. A pgid is not reused while any member of its group
lives (Linux keeps the number taken), and the leader's start time tells a reused number from ours.
Zombies count as gone: they run nothing, and their reaper may not be us.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

GRACE_S = 1.0  # after a leader's normal exit, how long its group's other members may take to end
REAP_S = 10.0  # how long a SIGKILLed group may take to disappear


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgrp, start time in ticks) of ``pid`` from /proc, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rfind(")") + 2:].split()  # after "pid (comm) "
    try:
        return fields[0], int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


MARK = "INKLING_BISECT_RUN"  # set in every run's environment: its processes carry the run's token


def new_token() -> str:
    """A run's token, for ``MARK`` in its environment (and the state file's live entry)."""
    import secrets

    return secrets.token_hex(12)


def identity(pid: int, token: str | None = None) -> dict:
    """What a state file keeps of a running group leader: ``{"pgid", "start", "boot", "token"}``."""
    st = _stat(pid)
    return {"pgid": pid, "start": st[2] if st else None, "boot": _boot_id(), "token": token}


def _carries(pid: int, token: str) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARK}={token}".encode() in env.split(b"\0")


def members(pgid: int) -> list[int]:
    """Live (not zombie) processes of group ``pgid``."""
    proc = Path("/proc")
    if not proc.is_dir():  # no /proc: ask the kernel about the group as a whole
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            return [pgid]
        return [pgid]
    out = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None and st[1] == pgid and st[0] != "Z":
                out.append(int(entry.name))
    return out


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid`` (none left is fine)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def wait_gone(pgid: int, timeout: float) -> bool:
    """Wait until group ``pgid`` has no live member; False when some remain after ``timeout``."""
    end = time.monotonic() + timeout
    while members(pgid):
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)
    return True


def end_group(pgid: int, grace: float = GRACE_S) -> bool:
    """After the leader's exit: let the rest of the group end within ``grace``, then kill it."""
    if wait_gone(pgid, grace):
        return True
    kill_group(pgid)
    return wait_gone(pgid, REAP_S)


def is_ours(ident: dict) -> bool:
    """Whether the group ``ident`` describes (from :func:`identity`) may still have live members."""
    if ident.get("boot") and _boot_id() and ident["boot"] != _boot_id():
        return False  # rebooted since: nothing of it runs
    st = _stat(ident["pgid"])
    if st is not None and ident.get("start") is not None and st[1] == ident["pgid"] and st[2] != ident["start"]:
        return False  # the number leads another, newer group
    alive = members(ident["pgid"])
    if ident.get("token") and Path("/proc").is_dir():
        return any(_carries(pid, ident["token"]) for pid in alive)  # a state naming another group kills nothing
    return bool(alive)


def reap(ident: dict, timeout: float = REAP_S) -> bool:
    """Kill and wait for a group a killed bisect left behind; True when nothing of it runs now."""
    if not is_ours(ident):
        return True
    kill_group(ident["pgid"])
    return wait_gone(ident["pgid"], timeout)


def run(args, *, shell: bool, env: dict, out: Path, timeout: float | None,
        on_start=None) -> tuple[int, str | None, float]:
    """Run ``args`` in a process group of its own, stdout and stderr into ``out``.

    ``on_start(pid)`` is called once it runs (the state file records the group there). Returns
    ``(exit code, why it crashed or None, seconds)``: -9 past ``timeout``, 127 when it could not start.
    The whole group is gone when this returns, also when it raises (an interrupt kills the group).
    """
    import subprocess

    t0 = time.monotonic()
    with open(out, "wb") as f:
        try:
            p = subprocess.Popen(args, shell=shell, env=env, stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            return 127, f"could not start: {e}", time.monotonic() - t0
        why = None
        try:
            if on_start is not None:
                on_start(p.pid)
            try:
                code = p.wait(timeout)
            except subprocess.TimeoutExpired:
                kill_group(p.pid)
                p.wait()
                code, why = -9, f"timed out after {timeout} s"
        except BaseException:
            kill_group(p.pid)
            p.wait()
            wait_gone(p.pid, REAP_S)
            raise
        if not end_group(p.pid):
            why = why or f"process group {p.pid} would not end after SIGKILL"
        return code, why, time.monotonic() - t0
