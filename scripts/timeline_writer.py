"""The writer process with a timeline, for scripts/timeline_record.py (which starts it in place of
``python -m inkling_probe.store.writer_process``): patches SegmentWriter, then runs the real module;
its events go to $WPROF_OUT/wev_<pid>.json at exit (and a cProfile with WPROF_CPROFILE=1)."""
import atexit
import json
import os
import runpy
import sys
import threading
import time


def timed(cls, name: str, tag: str, events: list) -> None:
    """Patch ``cls.name`` to append (monotonic time, tag + '<' / '>', {}) around each call."""
    orig = getattr(cls, name)

    def call(self, *a, **k):
        events.append((time.monotonic(), tag + "<", {}))
        try:
            return orig(self, *a, **k)
        finally:
            events.append((time.monotonic(), tag + ">", {}))
    setattr(cls, name, call)


def timed_jobs(jobs_cls, events: list) -> None:
    """Patch ``_Jobs.submit`` and ``_run`` to log ("job.submit" | "job<" | "job>", {bytes, thread})."""
    submit, run = jobs_cls.submit, jobs_cls._run

    def logged_submit(self, row, array, *a, **k):
        events.append((time.monotonic(), "job.submit", {"bytes": int(array.nbytes)}))
        return submit(self, row, array, *a, **k)

    def logged_run(self, row, array, *a, **k):
        info = {"bytes": int(array.nbytes), "thread": threading.get_ident()}
        events.append((time.monotonic(), "job<", info))
        try:
            return run(self, row, array, *a, **k)
        finally:
            events.append((time.monotonic(), "job>", info))
    jobs_cls.submit, jobs_cls._run = logged_submit, logged_run
    run_part = jobs_cls._run_part

    def logged_run_part(self, part, *a, **k):
        info = {"bytes": int(sum(array.nbytes for _, array, _ in part)), "thread": threading.get_ident()}
        events.append((time.monotonic(), "job<", info))
        try:
            return run_part(self, part, *a, **k)
        finally:
            events.append((time.monotonic(), "job>", info))
    jobs_cls._run_part = logged_run_part


def main() -> None:
    from inkling_probe.store import jobs as J, writer as W

    events = []
    timed_jobs(J._Jobs, events)
    for cls, name, tag in ((W.SegmentWriter, "add", "w.add"), (W.SegmentWriter, "add_batch", "w.batch"), (W.SegmentWriter, "end_segment", "w.end"),
                           (W.SegmentWriter, "_finish", "w.finish"), (J._Jobs, "wait", "w.jobswait"),
                           (W.SegmentWriter, "_create_dataset", "w.create")):
        timed(cls, name, tag, events)
    out = os.environ.get("WPROF_OUT", "/tmp")
    atexit.register(lambda: json.dump(events, open(f"{out}/wev_{os.getpid()}.json", "w")))
    if os.environ.get("WPROF_CPROFILE"):
        import cProfile
        import pstats
        profile = cProfile.Profile()
        profile.enable()

        def dump():
            profile.disable()
            pstats.Stats(profile, stream=open(f"{out}/wprof_{os.getpid()}.txt", "w")).sort_stats("tottime").print_stats(25)
        atexit.register(dump)
    sys.argv = ["inkling_probe.store.writer_process"] + sys.argv[1:]
    runpy.run_module("inkling_probe.store.writer_process", run_name="__main__")


if __name__ == "__main__":
    main()
