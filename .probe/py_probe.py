# Why is Python's 1 MiB map-path read slower than remora bench's on the H100 host?
import json, os, subprocess, sys, time
if len(sys.argv) > 2 and sys.argv[1] == "--one":
    import mmap
    import numpy as np
    import remora
    addr, kind = sys.argv[2], sys.argv[3]
    size = 1 << 20
    if kind == "aligned":
        m = mmap.mmap(-1, 2 << 20)
        out = np.frombuffer(m, np.uint8)[:size]
    else:
        out = np.empty(size, np.uint8)
    with remora.Context() as ctx:
        cli = remora.Client(ctx, addr)
        for phase, dur in (("warm", 0.02), ("run", 0.2)):
            n = 0; t = time.perf_counter(); end = t + dur
            while time.perf_counter() < end:
                cli.read("p", (n % 64) * size, out=out); n += 1
        gbps = n * size / (time.perf_counter() - t) / 1e9
    cuda = any("libcuda" in l for l in open("/proc/self/maps"))
    print(json.dumps({"gbps": gbps, "cuda": cuda, "dst64": out.ctypes.data % 64}))
    sys.exit(0)
remora_bin = sys.argv[1]
srv = subprocess.Popen([remora_bin, "serve", "--listen", "127.0.0.1:0", "--region", "p=64M:pattern"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
addr = srv.stdout.readline().decode().split()[1]
novis = dict(os.environ, CUDA_VISIBLE_DEVICES="")
res = {}
info = {}
def add(k, v): res.setdefault(k, []).append(v)
try:
    for r in range(15):
        for kind, env in (("numpy", None), ("numpy-novis", novis), ("aligned", None)):
            o = subprocess.run([sys.executable, __file__, "--one", addr, kind.split("-")[0]],
                               capture_output=True, text=True, env=env)
            j = json.loads(o.stdout.strip().splitlines()[-1]); add(kind, j["gbps"]); info[kind] = j
        for kind, env in (("bench", None), ("bench-novis", novis)):
            o = subprocess.run([remora_bin, "bench", addr + "/p", "--size", "1048576", "--seconds", "0.2", "--json"],
                               capture_output=True, text=True, env=env)
            add(kind, json.loads(o.stdout.strip().splitlines()[-1])["gbps"])
finally:
    srv.kill()
for k, v in res.items():
    v = sorted(v); print(f"{k:12} median {v[len(v)//2]:6.2f}  min {v[0]:6.2f} max {v[-1]:6.2f}", info.get(k, ""))
