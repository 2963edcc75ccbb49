#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Python binding vs `remora bench`, side by side in one run, on the same server and path.

    python3 python/bench.py [--remora build/tools/remora] [--seconds 2] [--path map|am|...]

Starts `remora serve` (a 64 MiB pattern region) and `remora stream serve` (a ring of
64 B elements at full rate), then measures
  1. 1 MiB blocks read into a preallocated NumPy array (target >= 0.9x remora bench),
  2. 64 B read round trip (target <= remora bench's + 3 us),
  3. a ring of 64 B elements consumed by a Python iterator (target >= 300,000 elements/s),
and prints each figure with remora bench's and the ratio. --json prints one JSON line.
Rounds (--rounds, default 31) alternate the two, and every round of either side is a
fresh process (`remora bench` is one by nature; the Python reader is this script with
--reader), so both sides draw their placement the same way. On the 16-core GPU host a
1 MiB memcpy from the server's memory runs anywhere between 7 and 17 GB/s depending on
the process (steady within one, pinned to a CPU or not): single rounds of the two sides
differ by 0.6-1.8x, so a figure needs many rounds. Each figure is the median round of its
side; the 1 MiB ratio comes with a 90 % bootstrap interval over the rounds. Each Python
round also times its reads against the same reads made by the C loop of `remora bench`
(Client._read_loop: remora_client_read in a loop) in alternating bursts in its own
process, into the same array: the binding's own cost, which the noise cannot reach.
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys
import time

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
# python/ (this script's directory, first on sys.path) holds the package's
# sources; use them only when built in place (setup.py build_ext --inplace),
# else the installed package.
if not glob.glob(os.path.join(here, "remora", "_remora*.so")):
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != here]
import remora  # noqa: E402


# --cpus R[,S]: readers (both sides) on CPU R, servers on CPU S.
PIN = {"reader": None, "server": None}


def pinned(role):
    cpu = PIN[role]
    return None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))


def start(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         preexec_fn=pinned("server"))
    line = p.stdout.readline().decode().split()
    if not line or line[0] != "listening":
        p.kill()
        sys.exit(f"{cmd[1]} did not start")
    return p, line[1]


def cli_bench(remora_bin, target, size, seconds, env):
    out = subprocess.run([remora_bin, "bench", target, "--size", str(size), "--seconds",
                          str(seconds), "--json"], capture_output=True, text=True, env=env,
                         preexec_fn=pinned("reader"),
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def py_reads(cli, size, seconds, region_size):
    """Like remora bench: depth 1, consecutive blocks, warm-up then the measured phase."""
    out = np.empty(size, np.uint8)
    nblocks = region_size // size
    lat = []
    for phase, dur in (("warm", min(0.2, seconds / 10)), ("run", seconds)):
        i = 0
        start = time.perf_counter()
        end = start + dur
        now = start
        while now < end:
            t0 = now
            cli.read("p", (i % nblocks) * size, out=out)
            now = time.perf_counter()
            if phase == "run":
                lat.append(now - t0)
            i += 1
    elapsed = sum(lat)
    lat.sort()
    return {"gbps": len(lat) * size / elapsed / 1e9, "lat_us_p50": lat[len(lat) // 2] * 1e6,
            "lat_us_avg": elapsed / len(lat) * 1e6, "iters": len(lat)}


def py_reads_fresh(addr, path, size, seconds, region_size):
    """py_reads in a process of its own (see the notes on top)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--reader", addr, "--size", str(size),
           "--seconds", str(seconds), "--region-size", str(region_size)]
    if path:
        cmd += ["--path", path]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         preexec_fn=pinned("reader")).stdout
    return json.loads(out.strip().splitlines()[-1])


def in_process(cli, size, region_size, bursts=10, per_burst=32):
    """Python's reads against the same reads by the C loop (Client._read_loop) in this
    process, into the same array, in alternating bursts: the binding's own cost, out of
    reach of the noise between processes. Returns C time / Python time."""
    out = np.empty(size, np.uint8)
    nblocks = region_size // size
    t_py = t_c = 0.0
    cli._read_loop("p", out, per_burst, region_size)  # warm both
    for _ in range(bursts):
        t_c += cli._read_loop("p", out, per_burst, region_size)
        t0 = time.perf_counter()
        for i in range(per_burst):
            cli.read("p", (i % nblocks) * size, out=out)
        t_py += time.perf_counter() - t0
    return t_c / t_py


def reader_main(a):
    """--reader: one Python round against a running server, one JSON line out."""
    with remora.Context() as ctx:
        cli = remora.Client(ctx, a.reader, path=a.path)
        cli.read("p", 0, 64)
        res = py_reads(cli, a.size, a.seconds, a.region_size)
        if a.size >= 1 << 20:
            res["in_process"] = in_process(cli, a.size, a.region_size)
        print(json.dumps(res))


def ratio_interval(rounds, key, n=2000):
    """5th and 95th percentiles of median(python) / median(bench) over resampled rounds."""
    rng = random.Random(1)
    k = len(rounds)
    got = []
    for _ in range(n):
        pick = [rounds[rng.randrange(k)] for _ in range(k)]
        bench = sorted(r[0][key] for r in pick)[k // 2]
        py = sorted(r[1][key] for r in pick)[k // 2]
        got.append(py / bench)
    got.sort()
    return got[n // 20], got[n - 1 - n // 20]


def median_by(rounds, side, key):
    """The round whose figure `key` on `side` (0: remora bench, 1: Python) is the median."""
    return sorted((r[side] for r in rounds), key=lambda d: d[key])[len(rounds) // 2]


def ring_rate(addr, seconds):
    with remora.Context() as ctx:
        cli = remora.Client(ctx, addr, timeout=5.0)
        sub = cli.subscribe("f", timeout=5.0)
        for _ in range(1000):
            next(sub)
        n = 0
        start = time.perf_counter()
        end = start + seconds
        first = None
        for e in sub:
            if first is None:
                first = e
            n += 1
            if n % 4096 == 0 and time.perf_counter() >= end:
                break
        el = time.perf_counter() - start
        return {"elements_per_s": n / el, "drops": e.drops - first.drops, "elements": n}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--remora", default=os.path.join(os.path.dirname(here), "build", "tools",
                                                     "remora"))
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--path", default=None, help="force a data path for both (REMORA_PATH)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rounds", type=int, default=31, help="alternating rounds per figure")
    ap.add_argument("--cpus", metavar="R[,S]",
                    help="pin the readers (remora bench and Python alike) to CPU R and the "
                         "servers to CPU S")
    ap.add_argument("--reader", metavar="ADDR", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=1 << 20, help=argparse.SUPPRESS)
    ap.add_argument("--region-size", type=int, default=64 << 20, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.reader:
        reader_main(a)
        return
    if a.cpus:
        cpus = [int(c) for c in a.cpus.split(",")]
        PIN["reader"], PIN["server"] = cpus[0], cpus[-1] if len(cpus) > 1 else None
    env = dict(os.environ)
    if a.path:
        env["REMORA_PATH"] = a.path
    srv, addr = start([a.remora, "serve", "--listen", "127.0.0.1:0", "--region", "p=64M:pattern"])
    res = {}
    try:
        with remora.Context() as ctx:
            cli = remora.Client(ctx, addr, path=a.path)
            cli.read("p", 0, 64)
            path = cli.path("p")
            for size, key in ((1 << 20, "1MiB"), (64, "64B")):
                # Rounds alternate remora bench and Python, each in a fresh
                # process, and which goes first alternates too; the median
                # round of each side is reported.
                rounds = []
                for r in range(a.rounds):
                    sec = a.seconds / a.rounds
                    pair = [lambda: cli_bench(a.remora, f"{addr}/p", size, sec, env),
                            lambda: py_reads_fresh(addr, a.path, size, sec, 64 << 20)]
                    first, second = (0, 1) if r % 2 == 0 else (1, 0)
                    got = {first: pair[first](), second: pair[second]()}
                    rounds.append((got[0], got[1]))
                res[key + "_rounds"] = [round(py["gbps"] / rb["gbps"], 3) for rb, py in rounds]
                res[key + "_interval"] = ratio_interval(rounds, "gbps")
                inproc = sorted(py["in_process"] for _, py in rounds if "in_process" in py)
                if inproc:
                    res[key + "_in_process"] = inproc[len(inproc) // 2]
                res[key] = {"remora_bench": median_by(rounds, 0, "gbps"),
                            "python": median_by(rounds, 1, "gbps")}
    finally:
        srv.kill()
    # The ring's producer runs flat out: started only now, so that it does
    # not take memory bandwidth and a core from the reads above.
    ring, raddr = start([a.remora, "stream", "serve", "--listen", "127.0.0.1:0", "--ring",
                         "f=64x65536", "--rate", "max"])
    try:
        res["ring64"] = ring_rate(raddr, a.seconds)
    finally:
        ring.kill()
    mb, m64, rr = res["1MiB"], res["64B"], res["ring64"]
    ratio = mb["python"]["gbps"] / mb["remora_bench"]["gbps"]
    lo, hi = res["1MiB_interval"]
    extra = m64["python"]["lat_us_p50"] - m64["remora_bench"]["lat_us_p50"]
    if a.json:
        print(json.dumps(dict(res, path=path)))
        return
    print(f"path {path} (remora bench: {mb['remora_bench']['path']}), {a.seconds:g} s each")
    print(f"{'measure':34} {'python':>12} {'remora bench':>13} {'':>18} target")
    print(f"{'1 MiB into numpy, GB/s, median':34} {mb['python']['gbps']:12.3f} "
          f"{mb['remora_bench']['gbps']:13.3f} {'ratio %.2fx' % ratio:>18} >= 0.9x "
          f"{'met' if ratio >= 0.9 else 'NOT met'}")
    rr1 = sorted(res["1MiB_rounds"])
    print(f"{'  90 % interval of the ratio':34} {lo:.2f}-{hi:.2f}x over {len(rr1)} rounds "
          f"(single rounds {rr1[0]:.2f}-{rr1[-1]:.2f}x)")
    print(f"{'  in one process, vs the C loop':34} {res['1MiB_in_process']:.3f}x (median of the "
          f"rounds; Python reads / the same reads by Client._read_loop)")
    print(f"{'64 B read round trip p50, us':34} {m64['python']['lat_us_p50']:12.2f} "
          f"{m64['remora_bench']['lat_us_p50']:13.2f} {'+%.2f us' % extra:>18} <= +3 us "
          f"{'met' if extra <= 3 else 'NOT met'}")
    print(f"{'  (avg, us)':34} {m64['python']['lat_us_avg']:12.2f} "
          f"{m64['remora_bench']['lat_us_avg']:13.2f}")
    print(f"{'ring 64 B, Python iterator, el/s':34} {rr['elements_per_s']:12.0f} "
          f"{'':13} {'drops %d' % rr['drops']:>18} >= 300000 "
          f"{'met' if rr['elements_per_s'] >= 300000 else 'NOT met'}")


if __name__ == "__main__":
    main()
