# Python map-path reads: does the destination's page size matter? fresh process per round.
import mmap, os, sys, time, json, subprocess
import numpy as np
if len(sys.argv) > 2 and sys.argv[1] == "--one":
    import remora
    addr, kind = sys.argv[2], sys.argv[3]
    size = 1 << 20
    if kind == "numpy":
        out = np.empty(size, np.uint8)
    else:
        m = mmap.mmap(-1, 4 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if kind == "huge":
            m.madvise(mmap.MADV_HUGEPAGE)
        a = np.frombuffer(m, np.uint8)
        off = (-a.ctypes.data) % (2 << 20)
        out = a[off:off + size]
        out[:] = 1
    with remora.Context() as ctx:
        cli = remora.Client(ctx, addr)
        n = 0; t = time.perf_counter(); end = t + 0.1
        while time.perf_counter() < end:
            cli.read("p", (n % 64) * size, out=out); n += 1
        n = 0; t = time.perf_counter(); end = t + 0.5
        while time.perf_counter() < end:
            cli.read("p", (n % 64) * size, out=out); n += 1
        print(json.dumps({"kind": kind, "gbps": n * size / (time.perf_counter() - t) / 1e9}))
    sys.exit(0)
remora_bin = sys.argv[1]
srv = subprocess.Popen([remora_bin, "serve", "--listen", "127.0.0.1:0", "--region", "p=64M:pattern"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
addr = srv.stdout.readline().decode().split()[1]
res = {"numpy": [], "plain": [], "huge": [], "bench": []}
try:
    for r in range(6):
        for kind in ("numpy", "plain", "huge"):
            o = subprocess.run([sys.executable, __file__, "--one", addr, kind], capture_output=True, text=True)
            res[kind].append(round(json.loads(o.stdout.strip().splitlines()[-1])["gbps"], 2))
        o = subprocess.run([remora_bin, "bench", addr + "/p", "--size", "1048576", "--seconds", "0.5", "--json"],
                           capture_output=True, text=True)
        res["bench"].append(round(json.loads(o.stdout.strip().splitlines()[-1])["gbps"], 2))
finally:
    srv.kill()
for k, v in res.items():
    print(k, "median", sorted(v)[len(v) // 2], v)
