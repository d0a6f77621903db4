"""Where a recorded GPU forward's time goes: a timeline of the recording process (forward, step()
waits, drain batches) merged with the writer process's (adds, dataset creates, jobs, segment ends),
on one clock, for inkling_model small bf16 with the process writer. A developer's tool for the
record() speed work (issue 9); it patches internals, so it follows them.

Run: python3 scripts/timeline_record.py   (STEPS=6; NULL=1: the writer drops everything; NULL=2:
the drain too; PROFILE=1: cProfile of the recording thread; DEV=cpu to try it without a GPU)
"""
import glob, json, os, subprocess, tempfile, time
import torch
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.environ.get("OUT", "/tmp")
os.environ["WPROF_OUT"] = OUT
EV = []
def ev(tag, **k): EV.append((time.monotonic(), tag, k))
_Popen = subprocess.Popen
def Popen(argv, *a, **k):
    if "inkling_probe.store.writer_process" in argv:
        i = argv.index("-m"); argv = argv[:i] + [os.path.join(HERE, "timeline_writer.py")] + argv[i + 2:]
    return _Popen(argv, *a, **k)
subprocess.Popen = Popen
import inkling_probe
from inkling_probe.recorder import drain as D, host_writer as HW, recorder as R, staging as S
from inkling_probe.store import writer_process as WP
from timeline_writer import timed


def wrap(cls, name, tag):
    timed(cls, name, tag, EV)


wrap(R.Recorder, "next_step", "m.step"); wrap(D.Drain, "flush", "m.flush"); wrap(WP.ProcessWriter, "_ack", "m.ack")
wrap(D.Drain, "_drain_batch", "d.batch"); wrap(D.Drain, "_seal", "m.seal"); wrap(S.CudaStager, "wait", "d.wait")
wrap(WP.ProcessWriter, "_wait_for_ring", "d.ringwait"); wrap(WP.ProcessWriter, "wait_for_ring_space", "m.ringwait")
DEV = os.environ.get('DEV', 'cuda')
def sync():
    if DEV == 'cuda': torch.cuda.synchronize()
NULL = os.environ.get("NULL", "")
if NULL == "1":  # writer does nothing: done() at once
    def _w(self, row, host, done, stats):
        (done or (lambda: None))()
    HW.HostWriter.write = _w
if NULL == "2":  # drain does nothing per tensor
    def _db(self, rows, host, token, spans, stats):
        self.stager.wait(token); self.stager.release(token)
    D.Drain._drain_batch = _db
    def _w(self, row, host, done, stats):
        (done or (lambda: None))()
    HW.HostWriter.write = _w
from inkling_model.config import InklingConfig
from inkling_model.model import InklingForCausalLM
torch.manual_seed(0)
model = InklingForCausalLM(InklingConfig.preset("small"), dtype=torch.bfloat16).to(DEV).eval()
with torch.no_grad():
    for p in model.parameters():
        p.normal_(0, 0.02) if p.is_floating_point() else None
ids = torch.randint(0, model.config.vocab_size, (256,), device=DEV)
fwd = model.forward
def forward(*a, **k):
    ev("m.fwd<"); r = fwd(*a, **k); ev("m.fwd>"); return r
model.forward = forward
root = tempfile.mkdtemp()
N = int(os.environ.get("STEPS", "6"))
with torch.no_grad():
    for _ in range(3): model(ids)
    sync(); t0 = time.perf_counter()
    for _ in range(N): model(ids)
    sync(); plain = (time.perf_counter() - t0) / N
    EV.clear()
    with inkling_probe.recording(os.path.join(root, "d"), writer="process"):
        for _ in range(2): model(ids)
        inkling_probe.step(); sync()
        time.sleep(0.2)
        import cProfile, pstats
        pr = cProfile.Profile() if os.environ.get("PROFILE") else None
        ev("T0"); t0 = time.perf_counter()
        if pr: pr.enable()
        for _ in range(N): model(ids)
        if pr: pr.disable()
        inkling_probe.step(); sync()
        rec = (time.perf_counter() - t0) / N; ev("T1")
_f = [(a, b) for a, b in zip([t for t, g, _ in EV if g == "m.fwd<"], [t for t, g, _ in EV if g == "m.fwd>"])]
_s = [(a, b) for a, b in zip([t for t, g, _ in EV if g == "m.step<"], [t for t, g, _ in EV if g == "m.step>"])]
_t0 = next(t for t, g, _ in EV if g == "T0")
body = (sum(b - a for a, b in _f if a >= _t0) - sum(b - a for a, b in _s if a >= _t0)) / N
print(f"plain {plain*1e3:.1f} ms/forward, recorded {rec*1e3:.1f} ms/forward: {rec/plain:.2f}x  (threads {os.environ.get('INKLING_PROBE_WRITER_THREADS','auto')}, NULL={NULL!r}); forward body {body*1e3:.1f} ms")
time.sleep(0.5)
wev = []
for p in glob.glob(f"{OUT}/wev_*.json"):
    wev += [tuple(e) for e in json.load(open(p))]; os.remove(p)
t0 = next(t for t, tag, _ in EV if tag == "T0"); t1 = next(t for t, tag, _ in EV if tag == "T1")
allev = sorted([e for e in EV + wev if t0 <= e[0] <= t1], key=lambda e: e[0])
# durations per tag pair
def spans(evs, tag):
    out, st = [], None
    for t, g, _ in evs:
        if g == tag + "<": st = t
        elif g == tag + ">" and st is not None: out.append((st, t)); st = None
    return out
for tag in ("m.fwd", "m.step", "m.flush", "m.ack", "d.batch", "d.wait", "d.ringwait", "m.ringwait", "w.add", "w.batch", "w.create", "w.end", "w.jobswait", "w.finish"):
    s = spans(allev, tag)
    tot = sum(b - a for a, b in s)
    print(f"{tag:12s} n={len(s):4d} total {tot*1e3:8.1f} ms  per step {tot/N*1e3:7.2f} ms")
jobs = []  # (start, end, bytes) per job, paired by thread
_open = {}
for t, g, k in allev:
    if g == "job<": _open[k["thread"]] = t
    elif g == "job>" and k["thread"] in _open: jobs.append((_open.pop(k["thread"]), t, k["bytes"]))
busy = sum(b - a for a, b, _ in jobs)
print(f"jobs {len(jobs)}: thread time per step {busy / N * 1e3:.1f} ms, {sum(n for *_, n in jobs) / N / 1e6:.0f} MB "
      f"per step, {sum(n for *_, n in jobs) / max(busy, 1e-9) / 1e9:.2f} GB/s per busy thread")
for a, b in spans(allev, "w.end"):  # what the jobs still had to do once the step's end arrived
    left = [(max(s0, a), e0, n) for s0, e0, n in jobs if e0 > a and s0 < b]
    print(f"  end of a step: {len(left)} jobs ({sum(n for *_, n in left) / 1e6:.0f} MB) still running or queued, "
          f"end took {(b - a) * 1e3:.1f} ms, job threads busy {sum(e0 - s0 for s0, e0, _ in left) * 1e3:.1f} ms in it")
# a compact timeline of step 3
marks = [e for e in allev if e[1] in ("m.fwd<","m.fwd>","m.step<","m.step>","m.flush>","m.seal<","d.batch<","d.batch>","w.end<","w.jobswait>","w.finish<","w.finish>","m.ack>")]
base = marks[0][0]
print("timeline (ms from T0):")
print(" ".join(f"{g}@{(t-base)*1e3:.1f}" for t, g, _ in marks[:80]))

if os.environ.get("PROFILE"):
    pstats.Stats(pr).sort_stats("tottime").print_stats(30)
