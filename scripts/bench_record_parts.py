"""Where a recorded GPU forward's extra time goes: the recording side's parts switched off one by one,
side by side with the plain forward (inkling_model small bf16, 256 tokens, process writer).

  record() only        probes filtered and indexed, nothing copied
  drain, no writer     copies, batches, statistics and device-to-host copies (into pooled pinned
                       buffers); the writer gets nothing
  ... spinning events  the same with the drain thread spinning in cudaEventSynchronize (the old way)
  ... logits one by one  the same with a float tensor too large for the batch copied on its own
  ... fp32 one by one  the same with float32 tensors copied one by one (only bf16 batched)
  durability=writer    everything, step() waiting for the step before
  ... writer discards  the same, the writer process taking every message and freeing the ring at once
                       (no hashing, no writing: what the hand-over itself costs the recording process)
  ... parallel writes  the same, the writer's job threads writing into the file at once (before
                       they took turns)
  ... writer threads N the same, the writer hashing and writing on N job threads (0: its main thread)
  ... writer far       the same, the writer process pinned to cores away from the recording process
                       (another last-level cache where the machine has several)
  durability=disk      everything, step() waiting for the step just ended (the default)

Beside each variant's wall time: CPU ms a forward of the recording thread, of the drain thread and of
the writer process (all its threads), from /proc.

With --peers: transformers' Inkling small bf16, 256 tokens, under ``record(model)`` (scripts/bench_record.py's
peer protocol), each part for the default (outputs and inputs) and for outputs only, so the default's
extra cost can be split the same way.

A developer's tool (it patches internals); needs a CUDA GPU. Run: python scripts/bench_record_parts.py
[--peers] [--profile] [--writer-profile]  (--profile: then a cProfile of the recording thread for three of
the variants; --writer-profile: then a cProfile of the writer process, every thread, for the default
durability's variant(s), the recording process's run repeated)
"""
import cProfile
import os
import shutil
import pstats
import statistics
import sys
import tempfile
import time

import torch

from bench_record import cuda_small_model, d2h_rate, disk_rate, peers_model, stored_mb  # this folder, on sys.path

import inkling_probe  # bench_record put the checkout on sys.path
from inkling_probe import sink
from inkling_probe.recorder import staging

FORWARDS = 4  # a timed run
ROUNDS = 7


def spinning_events(stager) -> None:
    def record(stream=None):
        stream = stream if stream is not None else torch.cuda.current_stream()
        with stager._room:
            pool = stager._events.setdefault(("spinning", stream.device.index), [])
            event = pool.pop() if pool else torch.cuda.Event()
        event.record(stream)
        return event

    def give(event):
        with stager._room:
            stager._events.setdefault(("spinning", event.device.index), []).append(event)
    stager._events.clear()
    stager.record, stager._give_event = record, give


class NoWriter:
    """A drain's writer (drain.py's Writer) that keeps nothing: each buffer goes back at once."""

    def write(self, row, host, done, stats) -> None:
        done()

    def write_batch(self, rows, host, spans, row_stats, done) -> None:
        done()

    def free_slot(self, view) -> None:
        pass


def no_writer(rec) -> None:
    """The writer gets nothing; staging goes through pooled pinned buffers (slots of the writer's
    ring would never be freed without it)."""
    pooled = staging.CudaStager()
    drain = rec._drain
    drain.stager.close()  # the ring stager it replaces: unregistered (everything before is on disk)
    for batch in (drain.batch, *drain._open.values()):
        batch.stager = pooled
    drain.stager = pooled
    pooled.drained_by(drain)
    drain._writer = NoWriter()


def nothing_staged(rec) -> None:
    rec._staged = lambda row, t: None


def no_batch_of_its_own(rec) -> None:
    rec._drain.batch.takes_alone = lambda t: False


def bf16_batches_only(rec) -> None:
    batch = rec._drain.batch
    takes = batch.takes
    batch.takes = lambda t: t.dtype is torch.bfloat16 and takes(t)


_DISCARD = """import os
if os.environ.get("INKLING_BENCH_WRITER_PROFILE"):  # scripts/bench_record_parts.py --writer-profile
    import atexit, cProfile, sys, threading
    _out = os.environ["INKLING_BENCH_WRITER_PROFILE"]
    _main = cProfile.Profile()
    _main.enable()
    atexit.register(lambda: (_main.disable(), _main.dump_stats(f"{_out}.{os.getpid()}.main")))
    if sys.version_info < (3, 12):  # (3.12's cProfile is one sys.monitoring tool for the whole
        # process: the main thread's sees every thread, and a second one cannot start)
        _run = threading.Thread.run

        def _profiled_run(self):
            p = cProfile.Profile()
            p.enable()
            try:
                _run(self)
            finally:
                p.disable()
                p.dump_stats(f"{_out}.{os.getpid()}.{self.native_id}")
        threading.Thread.run = _profiled_run
if os.environ.get("INKLING_BENCH_PARALLEL_WRITES") == "1":  # scripts/bench_record_parts.py only
    from inkling_probe.store import jobs as _j
    _j.SERIAL_WRITES = False
if os.environ.get("INKLING_BENCH_WRITER_DISCARDS") == "1":
    from inkling_probe.store import writer as _w

    def _add_batch(self, rows, flat, spans, sums=None, *, stats=True, store=True, on_stored=None):
        if on_stored is not None:
            on_stored()

    def _add(self, row, array, *, stats=True, store=True, on_stored=None):
        if on_stored is not None:
            on_stored()

    _w.SegmentWriter.add_batch, _w.SegmentWriter.add = _add_batch, _add
"""


def patched_writer_env(folder: str, name: str) -> dict:
    """Environment additions that make a writer process started under them discard what it gets
    ("discards" in the variant's name) or let its job threads write at once ("parallel writes"):
    a sitecustomize on PYTHONPATH, the product has no such switches."""
    switch = {"discards": "INKLING_BENCH_WRITER_DISCARDS", "parallel writes": "INKLING_BENCH_PARALLEL_WRITES"}
    extra = {var: "1" for word, var in switch.items() if word in name}
    if "profiled" in name:
        extra["INKLING_BENCH_WRITER_PROFILE"] = os.path.join(folder, "writer.prof")
    if not extra:
        return {}
    with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
        f.write(_DISCARD)
    extra["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH", "")) if p)
    return extra


def writer_threads(name: str) -> dict:
    """recording()'s writer_threads for a variant named '... writer threads N', else nothing."""
    words = name.split()
    return {"writer_threads": int(words[-1])} if "threads" in words else {}


def cpu_groups() -> tuple[list[int], list[int]]:
    """(cores for the recording process, cores for the writer): different last-level caches where
    the available cores span several, else the two halves of the available cores."""
    cpus = sorted(os.sched_getaffinity(0))
    groups: dict = {}
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/cache/index3/shared_cpu_list") as f:
                groups.setdefault(f.read().strip(), []).append(c)
        except OSError:
            groups.setdefault("?", []).append(c)
    if len(groups) > 1:
        first, *rest = groups.values()
        return first, [c for g in rest for c in g]
    return cpus[: len(cpus) // 2], cpus[len(cpus) // 2:]


def pin_tasks(pid: int, cpus: list[int]) -> None:
    """Pin every thread of process ``pid`` (and those it starts later) to ``cpus``."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


def far_writer(rec) -> None:
    pin_tasks(rec._writer._proc.pid, cpu_groups()[1])


def cpu_ticks(path: str) -> int:
    """utime + stime (clock ticks) from a /proc stat file; 0 when it is gone."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError):
        return 0


VARIANTS = {  # name: (durability, patch applied once the recorder's drain exists)
    "record() only": ("writer", nothing_staged),
    "drain, no writer": ("writer", no_writer),
    "drain, no writer, spinning events": ("writer", lambda rec: (no_writer(rec), spinning_events(rec._drain.stager))),
    "drain, no writer, logits one by one": ("writer", lambda rec: (no_writer(rec), no_batch_of_its_own(rec))),
    "drain, no writer, fp32 one by one": ("writer", lambda rec: (no_writer(rec), bf16_batches_only(rec))),
    "durability=writer": ("writer", None),
    "durability=writer, writer discards": ("writer", None),  # started under patched_writer_env
    "durability=writer, parallel writes": ("writer", None),  # started under patched_writer_env
    "durability=writer, writer threads 0": ("writer", None),  # recording(writer_threads=0)
    "durability=writer, writer threads 1": ("writer", None),
    "durability=writer, writer far": ("writer", far_writer),
    "durability=disk": ("disk", None),
    "durability=disk, parallel writes": ("disk", None),
    "durability=disk, writer threads 0": ("disk", None),
    "durability=disk, writer threads 1": ("disk", None),
}

PEER_PARTS = {  # --peers: each part for the default and for outputs only
    "record() only": ("writer", nothing_staged),
    "drain, no writer": ("writer", no_writer),
    "durability=writer": ("writer", None),
    "durability=writer, writer discards": ("writer", None),
    "durability=disk": ("disk", None),
}
PEER_VARIANTS = {f"{who}: {part}": spec for who in ("default", "outputs only") for part, spec in PEER_PARTS.items()}


# where a step's end spends its time: the functions between step() and the step on disk
STEP_END_WRITER = r"writer\.py.*\((end_segment|_finish|_write_packs)\)|segment_file\.py.*_close_lane|refs\.py.*place|jobs\.py.*\(wait\)|writer_process\.py.*_apply"
STEP_END_RECORDING = r"recorder\.py.*(next_step|_end_step)|drain\.py.*flush|writer_process\.py.*(_ack|end_segment|_send)"
# and where a probe's time goes on the recording thread (the hooks, torch.compiler.disable's wrapper, the recorder)
PROBE_PATH = STEP_END_RECORDING + r"|inkling_probe/(hooks|sink)\.py|recorder/(recorder|once|drain|step_batch|staging)\.py|eval_frame"


def writer_profiles(site: str, pids: dict) -> None:
    """Print the writer process's cProfile (its threads' files merged; tottime) for each variant
    whose writer ran profiled (``pids``: name -> the writer's pid). Call after the recordings closed."""
    import glob

    for name, pid in pids.items():
        files = sorted(glob.glob(os.path.join(site, f"writer.prof.{pid}.*")))
        if not files:
            print(f"-- no writer profile for {name} (pid {pid})")
            continue
        print(f"-- cProfile of the writer process, {name}, every run of it ({len(files)} profile files: one a "
              "thread, or one for all on Python 3.12+; tottime):")
        stats = pstats.Stats(*files)
        stats.sort_stats("tottime").print_stats(30)
        print("-- the same, the step's end in the writer (cumulative: wall time in each, job threads' waits included):")
        stats.sort_stats("cumulative").print_stats(STEP_END_WRITER)


def main() -> None:
    peers = "--peers" in sys.argv
    variants = PEER_VARIANTS if peers else VARIANTS
    near, far = cpu_groups()
    pin_tasks(os.getpid(), near)  # the recording process on one side for every variant (plain too)
    print(f"recording process on cores {near}; 'writer far' on {far}; other writers unpinned")
    model, ids = peers_model(cuda=True) if peers else cuda_small_model()
    if "--writer-profile" in sys.argv:
        durable = [n for n in variants if n.endswith("durability=disk")]
        variants = {**variants, **{f"{n}, writer profiled": variants[n] for n in durable}}

    def forwards(name):
        if not peers or name == "plain":
            for _ in range(FORWARDS):
                model(ids)
            return
        with inkling_probe.record(model, inputs=name.startswith("default")):
            for _ in range(FORWARDS):
                inkling_probe.step()
                model(ids)
    root = tempfile.mkdtemp(prefix="bench-parts-")
    recs = {}
    cpu = {}  # name -> [(recording thread, drain thread, writer process) CPU seconds a forward]
    tick = os.sysconf("SC_CLK_TCK")

    def threads(rec):
        drain = getattr(rec, "_drain", None) if rec is not None else None
        proc = getattr(getattr(rec, "_writer", None), "_proc", None)
        thread = getattr(drain, "_thread", None)  # (started with the drain's first batch)
        return (f"/proc/self/task/{thread.native_id}/stat" if thread is not None else "",
                f"/proc/{proc.pid}/stat" if proc is not None else "")

    def run(name):
        rec = recs.get(name)
        sink._RECORDER = rec
        drain_stat, writer_stat = threads(rec)
        c0, d0, w0 = time.thread_time(), cpu_ticks(drain_stat), cpu_ticks(writer_stat)
        t0 = time.perf_counter()
        forwards(name)
        if rec is not None:
            inkling_probe.step()
            if hasattr(rec._writer, "wait_for_ends"):
                rec._writer.wait_for_ends()  # every run ends with its steps on disk
        torch.cuda.synchronize()
        sink._RECORDER = None
        wall = (time.perf_counter() - t0) / FORWARDS
        cpu.setdefault(name, []).append(((time.thread_time() - c0) / FORWARDS,
                                         (cpu_ticks(drain_stat) - d0) / tick / FORWARDS,
                                         (cpu_ticks(writer_stat) - w0) / tick / FORWARDS))
        return wall

    contexts = []
    site = tempfile.mkdtemp(prefix="bench-parts-site-")
    with torch.no_grad():
        for name, (durability, patch) in variants.items():
            extra = patched_writer_env(site, name)
            saved = {k: os.environ.get(k) for k in extra}
            os.environ.update(extra)  # the writer process starts with the recording
            try:
                ctx = inkling_probe.recording(os.path.join(root, str(len(contexts))), writer="process",
                                              durability=durability, **writer_threads(name))
                recs[name] = ctx.__enter__()
            finally:
                for k, v in saved.items():
                    os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
            contexts.append((ctx, recs[name]))
            sink._RECORDER = None
            run(name)  # creates the drain
            if patch:
                patch(recs[name])
            run(name)
        names = ["plain", *variants]
        times = {n: [] for n in names}
        cpu.clear()
        run("plain")
        for _ in range(ROUNDS):
            for n in names:
                times[n].append(run(n))
        if "--profile" in sys.argv:  # where the recording thread's CPU goes, per function
            for name in [n for n in variants if n.endswith(("record() only", "drain, no writer", "durability=disk"))]:
                profile = cProfile.Profile()
                profile.runcall(run, name)
                print(f"-- cProfile of the recording thread, {name}, {FORWARDS} forwards (tottime):")
                pstats.Stats(profile).sort_stats("tottime").print_stats(22)
                print("-- the same, the probes' path and the step's end on the recording thread (cumulative):")
                pstats.Stats(profile).sort_stats("cumulative").print_stats(PROBE_PATH)
    profiled = {n: r._writer._proc.pid for n, r in recs.items() if "profiled" in n}
    for ctx, rec in contexts:
        sink._RECORDER = rec
        ctx.__exit__(None, None, None)
    writer_profiles(site, profiled)
    shutil.rmtree(site, ignore_errors=True)
    mb = stored_mb(inkling_probe.open(os.path.join(root, str(len(contexts) - 1))), step=1)
    disk, d2h = disk_rate(), d2h_rate()
    base = statistics.median(times["plain"])
    print(f"GPU {torch.cuda.get_device_name()}, {FORWARDS} forwards a run, {ROUNDS} rounds interleaved; "
          f"median ms/forward, ratio to plain [quartiles]; CPU ms/forward: recording thread | drain | writer")
    for n in names:
        ratios = statistics.quantiles([a / b for a, b in zip(times[n], times["plain"])], n=4)
        c = [statistics.median(x[i] for x in cpu.get(n, [(0, 0, 0)])) * 1e3 for i in range(3)]
        print(f"  {n:50s} {statistics.median(times[n]) * 1e3:6.1f}  {statistics.median(times[n]) / base:.2f}x "
              f"[{ratios[0]:.2f}-{ratios[2]:.2f}]  +{(statistics.median(times[n]) - base) / (mb / disk):.2f} "
              f"of the write's time | CPU {c[0]:5.1f} | {c[1]:5.1f} | {c[2]:5.1f}")
    print(f"limit: {mb:.0f} MB a forward; device-to-host at pinned bandwidth ({d2h / 1e3:.1f} GB/s) "
          f"{mb / d2h * 1e3:.1f} ms, the disk's sustained write ({disk:.0f} MB/s) {mb / disk * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
