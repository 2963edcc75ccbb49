# SPDX-License-Identifier: BSD-3-Clause
"""Against `remora serve` / `remora stream serve` processes: byte-exact reads of the
pattern, writes, rings, and servers killed under a client."""
import signal
import threading
import time

import numpy as np
import pytest

import remora
from conftest import pattern

MiB = 1 << 20


@pytest.mark.parametrize("path", [None, "am"])
def test_read_write_pattern(spawn, client_of, path):
    srv = spawn("serve", "--listen", "127.0.0.1:0", "--region", "p=4M:pattern",
                "--region", "w=1M:zero", "--writable")
    cli = client_of(srv.addr, path=path)
    names = {i.name: i for i in cli.list()}
    assert names["p"].size == 4 * MiB and names["w"].size == MiB
    whole = cli.read("p", 0, out=np.empty(4 * MiB, np.uint8))
    np.testing.assert_array_equal(whole, pattern(0, 4 * MiB))
    for off, n in ((1, 7), (4093, 12345), (4 * MiB - 3, 3)):
        assert cli.read("p", off, n) == pattern(off, n).tobytes()
    words = cli.read("p", 8, dtype="<u8", shape=(2, 4))
    np.testing.assert_array_equal(words.view(np.uint8).ravel(), pattern(8, 64))
    data = np.random.default_rng(1).integers(0, 256, MiB, dtype=np.uint8)
    cli.write("w", 0, data)
    np.testing.assert_array_equal(cli.read("w", dtype=np.uint8), data)
    reqs = [cli.read_nb("p", i * 65536, bytearray(65536)) for i in range(16)]
    for i, r in enumerate(reqs):
        assert r.wait() == pattern(i * 65536, 65536).tobytes()
    if path == "am":
        assert cli.path("p") == "am"


def test_stream_ring(spawn, client_of):
    srv = spawn("stream", "serve", "--listen", "127.0.0.1:0", "--ring", "f=4Kx64",
                "--rate", "2000")
    cli = client_of(srv.addr)
    sub = cli.subscribe("f", timeout=5.0)
    last = None
    for _, e in zip(range(200), sub):
        # each frame starts with its own sequence number (tools/cli_util.h)
        assert int.from_bytes(bytes(e)[:8], "little") == e.seq
        assert last is None or e.seq > last
        last = e.seq
    latest = cli.subscribe("f", "latest", timeout=5.0)
    e = latest.next()
    assert int.from_bytes(bytes(e)[:8], "little") == e.seq


def test_killed_server_blocking_calls(spawn, client_of):
    srv = spawn("serve", "--listen", "127.0.0.1:0", "--region", "p=1M:pattern")
    cli = client_of(srv.addr, timeout=10.0)
    assert cli.read("p", 0, 16) == pattern(0, 16).tobytes()
    srv.kill(signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(remora.Error) as exc:
        for _ in range(1000):
            cli.read("p", 0, 16)
            time.sleep(0.01)
    assert time.monotonic() - start < 6.0
    assert isinstance(exc.value, (remora.Disconnected, remora.Canceled, remora.TimedOut))
    with pytest.raises(remora.Error):
        cli.ping()
    ev = cli.next_event(timeout=5)
    assert ev is not None and ev.type == "disconnected"


def test_killed_server_under_subscriber_and_requests(spawn, client_of):
    srv = spawn("stream", "serve", "--listen", "127.0.0.1:0", "--ring", "f=64x256",
                "--rate", "100")
    region = spawn("serve", "--listen", "127.0.0.1:0", "--region", "big=64M:zero")
    cli = client_of(srv.addr, timeout=10.0)
    rcli = client_of(region.addr, timeout=10.0, path="am")
    sub = cli.subscribe("f", timeout=10.0)
    next(sub)
    outcome = {}

    def consume():
        try:
            for _ in sub:
                pass
        except remora.Error as e:
            outcome["sub"] = (e, time.monotonic())

    t = threading.Thread(target=consume)
    t.start()
    bufs = [np.empty(16 * MiB, np.uint8) for _ in range(4)]
    reqs = [rcli.read_nb("big", i * 16 * MiB, b) for i, b in enumerate(bufs)]
    time.sleep(0.1)
    killed = time.monotonic()
    srv.kill(signal.SIGKILL)
    region.kill(signal.SIGKILL)
    t.join(8)
    assert not t.is_alive(), "subscriber hung after the server died"
    assert isinstance(outcome["sub"][0], remora.Disconnected)
    assert outcome["sub"][1] - killed < 6.0
    for r in reqs:  # each either finished before the kill or fails, none hangs
        try:
            r.wait(timeout=8)
        except remora.Error as e:
            assert not isinstance(e, remora.TimedOut)
