# SPDX-License-Identifier: BSD-3-Clause
"""Regions against an in-process server: every call, byte-exact, and every way to get it wrong."""
import gc
import select
import sys
import threading
import time
import tracemalloc

import numpy as np
import pytest

import remora

RNG = np.random.default_rng(18)


def test_error_hierarchy():
    cases = {remora.InvalidParam: (-1, ValueError), remora.NoMemory: (-2, MemoryError),
             remora.TimedOut: (-3, TimeoutError), remora.Disconnected: (-4, ConnectionError),
             remora.NotFound: (-5, LookupError), remora.OutOfRange: (-6, IndexError),
             remora.ReadOnly: (-7, PermissionError), remora.AuthError: (-8, PermissionError),
             remora.ConnectionRefused: (-11, ConnectionRefusedError),
             remora.Busy: (-17, Exception)}
    for cls, (status, builtin) in cases.items():
        assert issubclass(cls, remora.Error) and issubclass(cls, builtin)
        assert remora.status_string(status) != remora.status_string(0)
    assert issubclass(remora.Closed, remora.InvalidParam)


def test_expose_list_read_write_numpy(server, client_of):
    a = RNG.integers(0, 2**32, size=(256, 1024), dtype=np.uint32)  # 1 MiB
    b = bytearray(RNG.bytes(1000))
    server.expose("a", a, writable=True)
    server.expose("b", b)
    cli = client_of(server)
    infos = {i.name: i for i in cli.list()}
    assert infos["a"].size == a.nbytes and infos["a"].writable and infos["a"].readable
    assert infos["b"].size == 1000 and not infos["b"].writable
    assert infos["a"].kind == "plain" and infos["a"].mem_type == "host"
    assert cli.lookup("b").generation == 1
    # bytes, whole region and odd windows
    assert cli.read("b") == bytes(b)
    assert cli.read("b", 3, 501) == bytes(b[3:504])
    assert cli.read("a", 0, a.nbytes) == a.tobytes()
    # into a preallocated array, and as a new array of a dtype/shape
    out = np.empty_like(a)
    assert cli.read("a", 0, out=out) is out
    np.testing.assert_array_equal(out, a)
    got = cli.read("a", 4096, dtype=np.uint32, shape=(1024,))
    np.testing.assert_array_equal(got, a[1])
    got = cli.read("a", 8, 16, dtype="<u4")
    np.testing.assert_array_equal(got, a.ravel()[2:6])
    # into part of a bytearray, a memoryview slice
    dst = bytearray(100)
    cli.read("b", 10, 50, out=memoryview(dst)[25:75])
    assert dst[25:75] == b[10:60] and dst[:25] == bytes(25)
    # writes land in the server's array, byte-exact
    new = RNG.integers(0, 2**32, size=1000, dtype=np.uint32)
    cli.write("a", 12, new)
    np.testing.assert_array_equal(a.ravel()[3:1003], new)
    cli.write("a", 0, b"\x01\x02", length=1)
    assert a.view(np.uint8).ravel()[0] == 1
    assert cli.read("a", 4, 4000) == a.tobytes()[4:4004]


def test_memory_map_path_and_replace(ctxs, server, client_of):
    mem = remora.Memory(ctxs[0], 1 << 16)
    view = np.frombuffer(mem, np.uint8)
    view[:] = RNG.integers(0, 256, size=view.size, dtype=np.uint8)
    server.expose("m", mem)
    cli = client_of(server)
    assert cli.read("m", 100, 1000) == view[100:1100].tobytes()
    assert cli.path("m") == "map"
    with pytest.raises(remora.Busy):
        mem.close()  # a memoryview (the NumPy array) still uses it
    del view
    other = np.arange(10, dtype=np.uint8)
    server.replace("m", other)
    ev = cli.next_event(timeout=5)
    assert ev.type == "region_changed" and ev.name == "m" and ev.size == 10
    assert ev.generation == 2
    assert cli.read("m") == other.tobytes()
    assert server.retired_count == 1
    assert server.sync_clients(timeout=5) == 0
    assert server.retired_count == 0
    server.unexpose("m")
    ev = cli.next_event(timeout=5)
    assert ev.type == "region_removed" and ev.name == "m"
    with pytest.raises(remora.NotFound):
        cli.read("m", 0, 1)


def test_window_and_exists(server, client_of):
    data = bytearray(range(256))
    server.expose("w", data, offset=16, length=32)
    with pytest.raises(remora.Exists):
        server.expose("w", data)
    cli = client_of(server)
    assert cli.read("w") == bytes(range(16, 48))


def test_wrong_types(server, client_of):
    with pytest.raises(TypeError):
        server.expose("x", 42)
    with pytest.raises(TypeError):
        server.expose("x", "a string")
    with pytest.raises(TypeError):
        server.expose("x", b"read-only bytes!", writable=True)
    ro = np.zeros(16, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(TypeError):
        server.expose("x", ro, writable=True)
    with pytest.raises((ValueError, BufferError)):
        server.expose("x", np.zeros((8, 8), np.uint8)[:, ::2])  # not contiguous
    server.expose("ro", b"sixteen bytes ok")  # read-only memory for a read-only region
    cli = client_of(server)
    assert cli.read("ro") == b"sixteen bytes ok"
    with pytest.raises(remora.ReadOnly):
        cli.write("ro", 0, b"x")
    with pytest.raises(TypeError):
        cli.read("ro", 0, 4, out=b"abcd")  # a read-only destination
    with pytest.raises(TypeError):
        cli.read("ro", 0, 4, out=ro[:4])
    with pytest.raises(TypeError):
        cli.read("ro", "0", 4)
    with pytest.raises(TypeError):
        cli.read(b"ro")
    with pytest.raises(TypeError):
        cli.write("ro", 0, 1234)
    with pytest.raises(TypeError):
        cli.read_nb("ro", 0, b"abcd")
    with pytest.raises(ValueError):
        remora.Client(cli_ctx(cli), server.address, path="teleport")
    with pytest.raises(ValueError):
        cli.subscribe("ro", mode="sometimes")


def cli_ctx(cli):
    # the fixture's client context is the second one
    return _ctxs[1]


@pytest.fixture(autouse=True)
def _remember_ctxs(ctxs):
    global _ctxs
    _ctxs = ctxs


def test_offsets_out_of_range(server, client_of):
    server.expose("r", bytearray(64), writable=True)
    cli = client_of(server)
    for off in (-1, -2**63, 2**64, 2**70):
        with pytest.raises(remora.OutOfRange):
            cli.read("r", off, 1)
        with pytest.raises(remora.OutOfRange):
            cli.write("r", off, b"x")
        with pytest.raises(remora.OutOfRange):
            cli.read_nb("r", off, bytearray(1))
    with pytest.raises(remora.OutOfRange):
        cli.read("r", 0, -5)
    for off, n in ((60, 8), (64, 1), (2**64 - 1, 2), (2**63, 1)):
        with pytest.raises(remora.OutOfRange):
            cli.read("r", off, n)
        with pytest.raises(remora.OutOfRange):
            cli.write("r", off, bytes(n))
    with pytest.raises(remora.OutOfRange):
        cli.read("r", 0, 10, out=bytearray(5))
    with pytest.raises(remora.OutOfRange):
        cli.read("r", 65)  # past the end, no length
    assert cli.read("r", 64, 0) == b""


def test_nonblocking_requests(server, client_of):
    src = RNG.integers(0, 256, size=1 << 20, dtype=np.uint8)
    server.expose("s", src, writable=True)
    cli = client_of(server)
    outs = [np.empty(4096, np.uint8) for _ in range(32)]
    reqs = [cli.read_nb("s", i * 4096, o) for i, o in enumerate(outs)]
    for i, (r, o) in enumerate(zip(reqs, outs)):
        assert r.wait() is o
        assert r.done() and r.status == 0
        np.testing.assert_array_equal(o, src[i * 4096:(i + 1) * 4096])
    patch = np.full(1000, 7, np.uint8)
    with cli.write_nb("s", 5, patch) as w:
        while not w.done():
            time.sleep(0.001)
        assert w.wait() is None
    assert (src[5:1005] == 7).all()
    with pytest.raises(remora.OutOfRange):  # refused at once, or by wait()
        cli.read_nb("s", (1 << 20) - 10, bytearray(20)).wait()
    slow = cli.read_nb("s", 0, bytearray(1 << 20))
    slow.wait()
    assert slow.wait() is slow.wait()  # the outcome stays
    r = cli.read_nb("s", 0, bytearray(100), length=10)
    assert r.wait()[:10] == src[:10].tobytes()


def test_ping_path_lanes(server, client_of):
    server.expose("p", bytearray(8))
    cli = client_of(server, path="am")
    rtt = cli.ping()
    assert 0 < rtt < 1.0
    cli.read("p")
    assert cli.path("p") == "am"
    assert cli.lanes == 1
    assert cli.timeout == 5.0


def test_events_fd_and_callback(server, client_of):
    server.expose("e", bytearray(16))
    seen = []
    got = threading.Event()

    def on_event(ev):
        seen.append(ev)
        got.set()

    cli = client_of(server)
    cbcli = client_of(server, on_event=on_event)
    assert cli.next_event() is None  # nothing yet, no wait
    server.replace("e", bytearray(32))
    r, _, _ = select.select([cli.event_fd], [], [], 5)
    assert r == [cli.event_fd]
    ev = cli.next_event()
    assert (ev.type, ev.name, ev.size) == ("region_changed", "e", 32)
    assert not select.select([cli.event_fd], [], [], 0)[0]  # drained
    assert got.wait(5)
    assert seen[0].type == "region_changed"
    server.close()
    ev = cli.next_event(timeout=5)
    assert ev is not None and ev.type == "disconnected" and ev.name is None
    assert ev.status < 0
    deadline = time.monotonic() + 5
    while not any(e.type == "disconnected" for e in seen) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert any(e.type == "disconnected" for e in seen)
    with pytest.raises(remora.Error):
        cli.read("e", 0, 1)


def test_token(ctxs):
    token = b"0123456789abcdef-secret"
    with remora.Server(ctxs[0], token=token) as srv:
        srv.expose("t", b"authorised bytes")
        with pytest.raises(remora.AuthError):
            remora.Client(ctxs[1], srv.address, token=b"x" * 16, timeout=3)
        with pytest.raises(remora.Error):
            remora.Client(ctxs[1], srv.address, timeout=3)
        with remora.Client(ctxs[1], srv.address, token=token, timeout=3) as cli:
            assert cli.read("t") == b"authorised bytes"
    with pytest.raises(remora.InvalidParam):
        remora.Server(ctxs[0], token=b"short")


def test_connect_failures(ctxs, server):
    with pytest.raises(remora.ConnectionRefused):
        remora.Client(ctxs[1], "127.0.0.1:1", timeout=3)
    with pytest.raises(remora.AddressError):
        remora.Client(ctxs[1], "not an address", timeout=3)
    with pytest.raises(TypeError):
        remora.Client("ctx", server.address)


@pytest.mark.parametrize("cm", ["0", "1"])
def test_own_servers_context(ctxs, monkeypatch, cm):
    """A client in its own server's context: over worker addresses UCX cannot pair a
    worker with itself (Unsupported, cleanly); through UCX's connection manager (the
    server's default from UCX 1.16 on) it connects and reads."""
    monkeypatch.setenv("REMORA_CM", cm)  # read when the server is made
    with remora.Server(ctxs[0]) as srv:
        data = bytearray(b"same context")
        srv.expose("s", data)
        if cm == "0":
            with pytest.raises(remora.Unsupported):
                remora.Client(ctxs[0], srv.address, timeout=3)
        else:
            with remora.Client(ctxs[0], srv.address, timeout=3) as cli:
                assert cli.read("s") == bytes(data)


def test_closed_objects(ctxs):
    sctx, cctx = remora.Context(), remora.Context()
    srv = remora.Server(sctx)
    srv.expose("c", bytearray(8), writable=True)
    ring = remora.Ring(sctx, 8, 4)
    cli = remora.Client(cctx, srv.address, timeout=3)
    cli.close()
    cli.close()  # idempotent
    assert cli.closed
    for call in (lambda: cli.read("c"), lambda: cli.write("c", 0, b"x"), cli.list, cli.ping,
                 lambda: cli.subscribe("c")):
        with pytest.raises(remora.Closed):
            call()
    ring.close()
    with pytest.raises(remora.Closed):
        ring.push(b"x")
    with pytest.raises(remora.Closed):
        srv.expose_ring("r", ring)
    cli2 = remora.Client(cctx, srv.address, timeout=3)
    sub_ring = remora.Ring(sctx, 8, 4)
    srv.expose_ring("r", sub_ring)
    sub = cli2.subscribe("r")
    mem = remora.Memory(sctx, 64)
    sctx.close()  # closes srv, the rings and mem, newest first
    assert srv.closed and sub_ring.closed and mem.closed
    with pytest.raises(remora.Closed):
        srv.expose("d", bytearray(8))
    with pytest.raises(remora.Closed):
        remora.Server(sctx)
    with pytest.raises(remora.Error):
        sub.next(timeout=3)  # its server went away
    cctx.close()
    assert cli2.closed and sub.closed
    with pytest.raises(remora.Closed):
        next(sub)
    with pytest.raises(remora.Closed):
        cli2.read("c")


def test_gil_released_during_blocking_calls(ctxs, server, client_of):
    ring = remora.Ring(ctxs[0], 8, 8)
    server.expose_ring("g", ring)
    cli = client_of(server)
    sub = cli.subscribe("g", timeout=1.0)
    done = threading.Event()
    err = []

    def wait():
        try:
            sub.next()
        except remora.TimedOut as e:
            err.append(e)
        done.set()

    t = threading.Thread(target=wait)
    start = time.monotonic()
    t.start()
    spins = 0
    while not done.is_set():
        spins += 1  # this thread runs while the other waits in the library
    t.join()
    assert time.monotonic() - start >= 0.9
    assert err and spins > 10000


def test_no_leaks_over_100k_reads(ctxs, server, client_of):
    mem = remora.Memory(ctxs[0], 4096)
    np.frombuffer(mem, np.uint8)[:] = 5
    server.expose("leak", mem)
    src = bytearray(4096)
    server.expose("leak-am", src)
    cli = client_of(server)
    out = np.empty(64, np.uint8)
    name = "leak"

    def loop(n, fn):
        for _ in range(n):
            fn()

    def check(fn, n):
        loop(1000, fn)  # warm up caches
        gc.collect()
        tracemalloc.start()
        refs = (sys.getrefcount(out), sys.getrefcount(name), sys.getrefcount(cli))
        objs = len(gc.get_objects())
        before = tracemalloc.get_traced_memory()[0]
        loop(n, fn)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        grown = len(gc.get_objects()) - objs
        tracemalloc.stop()
        assert (sys.getrefcount(out), sys.getrefcount(name), sys.getrefcount(cli)) == refs
        assert grown < 10, f"{grown} more objects after {n} calls"
        assert after - before < 64 * 1024, f"{after - before} bytes kept over {n} calls"

    check(lambda: cli.read(name, 0, 64), 100_000)
    check(lambda: cli.read(name, 0, out=out), 100_000)
    check(lambda: cli.read(name, 0, 64, dtype=np.uint8), 20_000)
    check(lambda: cli.read_nb(name, 0, out).wait(), 20_000)

    def missing():
        try:
            cli.read("no-such-region", 0, 8)
        except remora.NotFound:
            pass

    check(missing, 5_000)


def test_read_loop_hook(server, client_of):
    """Client._read_loop (python/bench.py's C loop): consecutive blocks, wrapping."""
    a = RNG.integers(0, 256, size=4 * 4096, dtype=np.uint8)
    server.expose("a", a)
    cli = client_of(server)
    out = np.empty(4096, np.uint8)
    took = cli._read_loop("a", out, 6, a.nbytes)   # blocks 0 1 2 3 0 1
    assert isinstance(took, float) and took > 0
    np.testing.assert_array_equal(out, a[4096:8192])
    with pytest.raises(ValueError):
        cli._read_loop("a", out, 1, 100)            # span below the buffer
    with pytest.raises(remora.NotFound):
        cli._read_loop("nothing", out, 1, a.nbytes)
    with pytest.raises(TypeError):
        cli._read_loop("a", b"read-only", 1, a.nbytes)


def test_integer_options_are_range_checked(ctxs):
    """Options are 32-bit in the library: larger or negative ints raise, not wrap."""
    with pytest.raises(OverflowError):
        remora.Context(spin_us=2**40)
    with pytest.raises(OverflowError):
        remora.Context(heartbeat_ms=2**32)
    with pytest.raises(OverflowError):
        remora.Server(ctxs[0], "127.0.0.1:0", max_conns=-1)
    with pytest.raises(OverflowError):
        remora.Client(ctxs[0], "127.0.0.1:1", lanes=-1)
