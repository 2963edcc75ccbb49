# SPDX-License-Identifier: BSD-3-Clause
"""Signals: local words, Server.expose_signals, Client.signal, waits with the GIL
released, bad input, and a server process killed under a client."""
import os
import subprocess
import sys
import threading
import time

import pytest

import remora

U64 = 1 << 64


def test_local_words():
    with remora.Context() as ctx, remora.Signals(ctx, 4, init=5) as sig:
        assert len(sig) == 4 and sig.tolist() == [5, 5, 5, 5]
        sig.set(0, U64 - 1)
        sig.add(0, 2)                      # wraps modulo 2**64
        sig.add(1, -1)                     # a negative value subtracts
        sig[2] = 7
        assert sig.tolist() == [1, 4, 7, 5]
        assert sig[-1] == 5 and sig.read(2) == 7 and sig.read(-4) == 1
        assert sig.wait(2, 7, "eq", timeout=0.1) == 7
        assert sig.wait(2, 8, "neq", timeout=0.1) == 7
        assert sig.wait(1, 3, ">=", timeout=0.1) == 4
        start = time.monotonic()
        with pytest.raises(remora.TimedOut):
            sig.wait(1, 5, timeout=0.1)
        assert 0.09 < time.monotonic() - start < 2.0
        # GEQ is wrap-safe: a word just past 2**64 has "reached" a value just below it.
        assert sig.wait(0, U64 - 2, timeout=0.1) == 1
        assert "4 words" in repr(sig)


def test_bad_input():
    with remora.Context() as ctx:
        for count in (0, 1 << 25):
            with pytest.raises(remora.InvalidParam):
                remora.Signals(ctx, count)
        with pytest.raises(remora.OutOfRange):
            remora.Signals(ctx, -1)
        with pytest.raises(TypeError):
            remora.Signals(ctx, "4")
        with pytest.raises(TypeError):
            remora.Signals("ctx", 4)
        sig = remora.Signals(ctx, 2)
        for bad in (2, -3, 1 << 40):
            with pytest.raises(remora.OutOfRange):
                sig.read(bad)
        with pytest.raises(IndexError):
            sig[2]
        with pytest.raises(OverflowError):
            sig.set(0, U64)
        with pytest.raises(OverflowError):
            sig.add(0, -(1 << 63) - 1)
        with pytest.raises(TypeError):
            sig.set(0, 1.5)
        with pytest.raises(ValueError):
            sig.wait(0, 1, "gt", timeout=0)
        with pytest.raises(ValueError):
            sig.wait(0, 1, timeout=-1)
        with pytest.raises(TypeError):
            del sig[0]
        sig.close()
        sig.close()                        # idempotent
        assert sig.closed
        for call in (lambda: sig[0], lambda: sig.set(0, 1), lambda: sig.wait(0, 0, timeout=0),
                     lambda: sig.tolist(), lambda: sig.device_ptr):
            with pytest.raises(remora.Closed):
                call()


def test_wait_releases_gil_and_close_during_wait():
    with remora.Context() as ctx:
        sig = remora.Signals(ctx, 1)
        got = {}

        def waiter():
            got["v"] = sig.wait(0, 3, timeout=5.0)

        t = threading.Thread(target=waiter)
        t.start()
        for _ in range(3):                 # this thread runs while the other waits
            time.sleep(0.02)
            sig.add(0, 1)
        t.join(5.0)
        assert not t.is_alive() and got["v"] == 3

        def waiter_closed():
            try:
                sig.wait(0, 100, timeout=0.5)
            except remora.Error as e:
                got["err"] = e

        t = threading.Thread(target=waiter_closed)
        t.start()
        time.sleep(0.05)
        sig.close()                        # busy: closes when the wait returns
        t.join(5.0)
        assert not t.is_alive() and isinstance(got["err"], remora.TimedOut)
        assert sig.closed


def test_expose_and_client_signal(ctxs, server, client_of):
    sig = remora.Signals(ctxs[0], 8)
    server.expose_signals("sig", sig)
    server.expose("plain", bytearray(64), writable=True)
    assert server.regions["sig"] is sig
    cli = client_of(server)
    kinds = {i.name: i.kind for i in cli.list()}
    assert kinds == {"sig": "signals", "plain": "plain"}
    cli.signal("sig", 3, 41)
    cli.signal("sig", 3, 1, op="add")
    cli.signal("sig", 7, -1)               # SET to 2**64 - 1
    assert sig.wait(3, 42, "eq", timeout=2.0) == 42
    assert sig[7] == U64 - 1
    with pytest.raises(remora.OutOfRange):
        cli.signal("sig", 8, 1)
    with pytest.raises(remora.InvalidParam):
        cli.signal("plain", 0, 1)
    with pytest.raises(remora.NotFound):
        cli.signal("nothing", 0, 1)
    with pytest.raises(ValueError):
        cli.signal("sig", 0, 1, op="mul")
    with pytest.raises(remora.OutOfRange):
        cli.signal("sig", -1, 1)
    with pytest.raises(remora.Error):      # plain writes into signals are refused
        cli.write("sig", 0, b"\0" * 8)
    assert sig.tolist()[0] == 0
    # A second server cannot expose the same words.
    other = remora.Server(ctxs[0])
    try:
        with pytest.raises(remora.Busy):
            other.expose_signals("sig", sig)
    finally:
        other.close()
    # Closing the words unexposes them.
    sig.close()
    with pytest.raises(remora.NotFound):
        cli.signal("sig", 0, 1)


def test_add_from_8_clients_sums_exactly(ctxs, server, client_of):
    sig = remora.Signals(ctxs[0], 2)
    server.expose_signals("sig", sig)
    clients = [client_of(server) for _ in range(8)]
    n = 500

    def adder(cli, k):
        for _ in range(n):
            cli.signal("sig", 1, k, op="add")

    threads = [threading.Thread(target=adder, args=(c, k + 1)) for k, c in enumerate(clients)]
    for t in threads:
        t.start()
    total = n * sum(range(1, 9))
    assert sig.wait(1, total, "geq", timeout=30.0) == total
    for t in threads:
        t.join(10.0)
    assert sig[1] == total and sig[0] == 0


SERVER = """
import sys, time, remora
with remora.Context() as ctx:
    srv = remora.Server(ctx)
    sig = remora.Signals(ctx, 4)
    srv.expose_signals("sig", sig)
    print("listening", srv.address, flush=True)
    sig.wait(0, 1, timeout=60)
    print("got", sig[0], flush=True)
    time.sleep(60)
"""


def test_killed_server(client_of):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, env=env,
                         text=True)
    try:
        line = p.stdout.readline().split()
        assert line and line[0] == "listening", line
        cli = client_of(line[1], timeout=5.0)
        cli.signal("sig", 0, 1)
        assert p.stdout.readline().split() == ["got", "1"]
        p.kill()
        p.wait(10)
        start = time.monotonic()
        with pytest.raises(remora.Error) as exc:
            for _ in range(1000):
                cli.signal("sig", 1, 1, op="add")
                time.sleep(0.01)
        assert time.monotonic() - start < 6.0
        assert isinstance(exc.value, (remora.Disconnected, remora.Canceled, remora.TimedOut))
    finally:
        p.kill()
        p.wait(10)
        p.stdout.close()
