#!/usr/bin/env python3
"""Ways to put one recorded step's bytes (119 tensors of 0.9 MB, as inkling_model small bf16 records)
into files on this host: buffered pwrite into one file or several, O_DIRECT, mmap. The writer puts a
step into one segment file, so the first line bounds it (docs/gpu/bench_record_cuda.txt).

Run: python3 scripts/bench_file_writes.py
"""
import atexit, mmap, os, shutil, statistics, tempfile, threading, time
import numpy as np
root = tempfile.mkdtemp(prefix="bench-writes-")
atexit.register(shutil.rmtree, root, True)
N, SZ = 119, 256 * 896 * 4  # ~0.9 MB each, 4 KiB multiples
src = mmap.mmap(-1, N * SZ)  # page-aligned source (as the shm ring is)
np.frombuffer(src, np.uint8)[:] = 7
views = [memoryview(src)[i * SZ:(i + 1) * SZ] for i in range(N)]
def med(fn, n=5):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
        for name in os.listdir(root):  # each run writes new files; keep the disk free
            os.remove(os.path.join(root, name))
    return f"{statistics.median(ts) * 1e3:.1f} ms"
def threaded(k, work):
    ths = [threading.Thread(target=work, args=(j,)) for j in range(k)]
    [t.start() for t in ths]; [t.join() for t in ths]
def buffered(threads, files):
    def run():
        fds = [os.open(f"{root}/b{time.time_ns()}_{j}", os.O_WRONLY | os.O_CREAT) for j in range(files)]
        def work(j):
            for i in range(j, N, threads):
                os.pwrite(fds[i % files], views[i], (i // files) * SZ)
        threaded(threads, work); [os.close(fd) for fd in fds]
    return run
def direct(threads, prealloc):
    def run():
        fd = os.open(f"{root}/d{time.time_ns()}", os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
        if prealloc: os.posix_fallocate(fd, 0, N * SZ)
        def work(j):
            for i in range(j, N, threads): os.pwrite(fd, views[i], i * SZ)
        threaded(threads, work); os.close(fd)
    return run
def mapped(threads):
    def run():
        fd = os.open(f"{root}/m{time.time_ns()}", os.O_RDWR | os.O_CREAT)
        os.posix_fallocate(fd, 0, N * SZ)
        m = mmap.mmap(fd, N * SZ)
        try: m.madvise(23)  # MADV_POPULATE_WRITE
        except OSError as e: print("populate", e)
        dst = np.frombuffer(m, np.uint8)
        s = np.frombuffer(src, np.uint8)
        def work(j):
            for i in range(j, N, threads): dst[i * SZ:(i + 1) * SZ] = s[i * SZ:(i + 1) * SZ]
        threaded(threads, work); del dst; m.close(); os.close(fd)
    return run
print(f"{N * SZ / 1e6:.0f} MB into {root} ({os.popen('df -T ' + root + ' | tail -1').read().split()[1]}):")
print("buffered 1 thread 1 file", med(buffered(1, 1)))
print("buffered 4 threads 1 file", med(buffered(4, 1)))
print("buffered 2 threads 2 files", med(buffered(2, 2)))
print("buffered 4 threads 4 files", med(buffered(4, 4)))
for k, pre in ((1, False), (1, True), (4, True)):
    try: print(f"O_DIRECT {k} thread(s) prealloc={pre}", med(direct(k, pre)))
    except OSError as e: print("O_DIRECT", e)
for k in (1, 4):
    print(f"mmap+populate {k} thread(s)", med(mapped(k)))
