# SPDX-License-Identifier: BSD-3-Clause
"""Rings in process: push, zero-copy reserve/commit, local reads, subscriptions."""
import threading
import time

import numpy as np
import pytest

import remora


@pytest.fixture
def ring(ctxs, server):
    r = remora.Ring(ctxs[0], 64, 256)
    server.expose_ring("frames", r)
    yield r
    r.close()


def frame(i, size=64):
    return np.full(size, i % 251, np.uint8)


def test_push_and_local_reads(ring):
    assert (ring.elem_size, ring.capacity, ring.head, ring.mem_type) == (64, 256, 0, "host")
    with pytest.raises(remora.OutOfRange):
        ring.newest()
    for i in range(300):
        assert ring.push(frame(i)) == i
    assert ring.head == 300
    assert ring.get(299) == frame(299).tobytes()
    e = ring.newest()
    assert (e.seq, bytes(e)) == (299, frame(299).tobytes())
    assert ring.oldest().seq == 300 - 256
    with pytest.raises(remora.OutOfRange):
        ring.get(10)  # overwritten
    with pytest.raises(remora.OutOfRange):
        ring.get(300)  # not yet pushed
    out = bytearray(64)
    assert ring.get(298, out=out) is out and out == frame(298).tobytes()
    assert ring.push(b"short") == 300
    assert ring.get(300) == b"short" + bytes(59)  # the rest zeroed
    with pytest.raises(remora.InvalidParam):
        ring.push(bytes(65))
    with pytest.raises(TypeError):
        ring.push(12)
    with pytest.raises(remora.OutOfRange):
        ring.get(-1)


def test_reserve_commit(ring):
    mv = ring.reserve()
    assert isinstance(mv, memoryview) and not mv.readonly and len(mv) == 64
    with pytest.raises(remora.Busy):
        ring.reserve()
    arr = np.frombuffer(mv, np.uint8)
    arr[:] = 9
    with pytest.raises(remora.Busy):
        ring.commit()  # the NumPy view still points into the slot
    del arr
    assert ring.commit() == 0
    with pytest.raises(ValueError):
        mv[0] = 1  # released: no write into a published slot
    assert ring.get(0) == bytes([9]) * 64
    with pytest.raises(remora.InvalidParam):
        ring.commit()
    with ring.slot() as s:
        s[:] = b"z" * 64
    assert ring.newest() == b"z" * 64 and ring.head == 2
    ctx = ring.slot()
    with pytest.raises(RuntimeError):
        with ctx as s:
            s[:4] = b"half"
            raise RuntimeError("camera failed")
    assert ctx.seq is None and ring.head == 2  # nothing published
    with ring.slot() as s:  # the same slot again
        s[:] = b"w" * 64
    assert ring.head == 3 and ring.newest() == b"w" * 64


def test_subscribe_every_and_latest(ring, client_of, server):
    cli = client_of(server)
    infos = {i.name: i for i in cli.list()}
    assert infos["frames"].kind == "ring"
    every = cli.subscribe("frames", timeout=2.0)
    latest = cli.subscribe("frames", "latest", timeout=2.0)
    assert every.elem_size == 64 and every.mode == "every" and latest.mode == "latest"
    for i in range(50):
        ring.push(frame(i))
    got = [next(every) for _ in range(50)]
    assert [e.seq for e in got] == list(range(50))
    assert all(bytes(e) == frame(e.seq).tobytes() for e in got)
    assert got[-1].drops == 0 and every.drops == 0
    e = latest.next()
    assert e.seq == 49 and bytes(e) == frame(49).tobytes() and e.drops == 49
    out = np.empty(64, np.uint8)
    ring.push(frame(50))
    assert every.next(out=out) is out and every.seq == 50
    np.testing.assert_array_equal(out, frame(50))
    with pytest.raises(remora.TimedOut):
        every.next(timeout=0.05)
    with pytest.raises(TypeError):
        every.next(out=b"read-only")
    with pytest.raises(remora.InvalidParam):
        every.next(out=bytearray(10))  # too small
    every.timeout = 0.05
    start = time.monotonic()
    with pytest.raises(remora.TimedOut):
        for _ in every:
            pass
    assert time.monotonic() - start < 1.0
    with pytest.raises(remora.NotFound):
        cli.subscribe("nope")
    server.expose("plain", bytearray(8))
    with pytest.raises(remora.InvalidParam):
        cli.subscribe("plain")


def test_drops_are_counted(ctxs, server, client_of):
    small = remora.Ring(ctxs[0], 8, 4)
    server.expose_ring("small", small)
    cli = client_of(server)
    sub = cli.subscribe("small", timeout=2.0)
    for i in range(20):
        small.push(i.to_bytes(8, "little"))
    seqs = []
    while True:
        e = sub.next(timeout=0.2) if seqs else sub.next()
        seqs.append(e.seq)
        assert int.from_bytes(bytes(e), "little") == e.seq
        if e.seq == 19:
            break
    assert e.drops == 20 - len(seqs)


def test_callback_subscription(ring, client_of, server):
    cli = client_of(server)
    got, done = [], threading.Event()

    def on_elem(e):
        got.append((e.seq, bytes(e)))
        if len(got) == 100:
            done.set()

    with cli.subscribe("frames", callback=on_elem) as cs:
        for i in range(100):
            ring.push(frame(i))
        assert done.wait(5)
    assert not cs.thread.is_alive() and cs.subscription.closed
    assert got == [(i, frame(i).tobytes()) for i in range(100)]


def test_callback_subscription_error(ring, client_of, server):
    cli = client_of(server)
    errors = []
    cs = cli.subscribe("frames", callback=lambda e: None, on_error=errors.append)
    server.close()
    cs.thread.join(10)
    assert not cs.thread.is_alive()
    assert len(errors) == 1 and isinstance(cs.error, remora.Error)
    cs.close()


def test_clone_and_image(ctxs, ring, client_of, server):
    for i in range(10):
        ring.push(frame(i))
    cli = client_of(server)
    clone = cli.clone_ring("frames")
    assert (clone.head, clone.elem_size, clone.capacity) == (10, 64, 256)
    assert clone.get(7) == frame(7).tobytes()
    img = ring.image()
    again = remora.Ring.from_image(ctxs[1], img)
    assert again.get(9) == frame(9).tobytes()
    with pytest.raises(remora.ProtocolError):
        remora.Ring.from_image(ctxs[1], b"\0" * 64)


def test_iterator_throughput(ctxs, server, client_of):
    """Enough for the benchmark target's order of magnitude, even on a loaded machine."""
    r = remora.Ring(ctxs[0], 64, 65536)
    server.expose_ring("fast", r)
    cli = client_of(server)
    sub = cli.subscribe("fast", timeout=2.0)
    n = 20000
    payload = bytes(64)
    for _ in range(n):
        r.push(payload)
    start = time.perf_counter()
    count = 0
    for e in sub:
        count += 1
        if e.seq == n - 1:
            break
    rate = count / (time.perf_counter() - start)
    assert count + e.drops == n
    assert rate > 20000, f"{rate:.0f} elements/s"


def test_next_from_two_threads_is_busy(ring, client_of, server):
    """One thread at a time may wait in next(): a second gets Busy (two in the
    library at once freed a wait under the other)."""
    sub = client_of(server).subscribe("frames", timeout=5.0)
    result = {}

    def waiter():
        try:
            result["seq"] = sub.next(timeout=3.0).seq
        except remora.Error as e:  # pragma: no cover - reported below
            result["error"] = e

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)  # the waiter is inside next(), the GIL let go
    with pytest.raises(remora.Busy):
        sub.next(timeout=0.1)
    ring.push(frame(7))
    t.join(5)
    assert result == {"seq": 0}
    sub.close()



def test_close_after_reserve(ctxs, server):
    """A ring with a reserved slot closes at once when no view of the slot is
    left (it stayed pending, and its context could not close at all); with a
    NumPy view alive the close waits for it, as a commit does."""
    ctx = remora.Context()
    r = remora.Ring(ctx, 64, 16)
    mv = r.reserve()
    del mv
    r.close()
    with pytest.raises(remora.Closed):
        r.commit()
    r2 = remora.Ring(ctx, 64, 16)
    r2.reserve()
    ctx.close()  # the context's own close gives up the ring's slot view too
    r3 = remora.Ring(ctxs[0], 64, 16)
    arr = np.frombuffer(r3.reserve(), np.uint8)
    r3.close()  # arr still points into the slot: the close is pending
    assert arr.sum() >= 0
    del arr
