# SPDX-License-Identifier: BSD-3-Clause
"""GPU memory from CuPy and PyTorch: exposed, read into, written from, rings.
Skipped (reported) without a CUDA driver or without CuPy/torch."""
import numpy as np
import pytest

import remora

cuda = remora.cuda_info()
pytestmark = pytest.mark.skipif(not cuda["available"] or cuda["device_count"] < 1,
                                reason=f"no GPU: {cuda['reason']}")

try:
    import cupy
except ImportError:
    cupy = None
try:
    import torch
    if not torch.cuda.is_available():
        torch = None
except ImportError:
    torch = None

need_cupy = pytest.mark.skipif(cupy is None, reason="CuPy not installed")
need_torch = pytest.mark.skipif(torch is None, reason="torch with CUDA not installed")
N = 1 << 20


class DLPackOnly:
    """Hides __cuda_array_interface__ so that the DLPack path is taken."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


@pytest.fixture
def host_region(server):
    data = np.random.default_rng(5).integers(0, 256, N, dtype=np.uint8)
    server.expose("h", data, writable=True)
    return data


@need_cupy
def test_cupy_read_into_and_write_from(server, client_of, host_region):
    cli = client_of(server)
    dst = cupy.empty(N, cupy.uint8)
    assert cli.read("h", 0, out=dst) is dst
    np.testing.assert_array_equal(cupy.asnumpy(dst), host_region)
    src = cupy.arange(4096, dtype=cupy.uint32)
    cli.write("h", 16, src)
    np.testing.assert_array_equal(host_region[16:16 + 16384].view(np.uint32), np.arange(4096))
    req = cli.read_nb("h", 0, dst)
    assert req.wait() is dst
    with pytest.raises(ValueError, match="not C-contiguous"):  # as for host arrays
        dst2 = cupy.empty((64, 64), cupy.uint8)[:, ::2]
        cli.read("h", 0, out=dst2)


@need_cupy
def test_cupy_array_exposed(ctxs, server, client_of):
    gpu = cupy.arange(N // 4, dtype=cupy.uint32)
    server.expose("g", gpu, writable=True)
    cli = client_of(server)
    info = cli.lookup("g")
    assert info.mem_type == "cuda" and info.size == N
    np.testing.assert_array_equal(cli.read("g", dtype=np.uint32), np.arange(N // 4))
    cli.write("g", 0, np.full(16, 0xAB, np.uint8))
    assert int(gpu[0]) == 0xABABABAB
    out = cupy.zeros(N // 4, cupy.uint32)
    cli.read("g", 0, out=out)
    assert bool((out == gpu).all())


@need_cupy
def test_library_gpu_memory(ctxs, server, client_of):
    mem = remora.Memory(ctxs[0], N, device=0)
    assert mem.mem_type == "cuda" and mem.device == 0
    arr = cupy.asarray(mem)  # through __cuda_array_interface__
    arr[:] = 7
    server.expose("lib", mem)
    cli = client_of(server)
    assert cli.read("lib", 0, 64) == b"\x07" * 64


@need_torch
def test_torch_cuda_tensor_cai_and_dlpack(server, client_of, host_region):
    cli = client_of(server)
    t = torch.empty(N, dtype=torch.uint8, device="cuda")
    cli.read("h", 0, out=t)
    assert torch.equal(t.cpu(), torch.from_numpy(host_region))
    t2 = torch.zeros(N, dtype=torch.uint8, device="cuda")
    cli.read("h", 0, out=DLPackOnly(t2))
    assert torch.equal(t2, t)
    w = torch.full((1024,), 3, dtype=torch.uint8, device="cuda")
    cli.write("h", 0, DLPackOnly(w))
    assert (host_region[:1024] == 3).all()
    f = torch.arange(256, dtype=torch.float32, device="cuda")
    cli.write("h", 4096, f)
    np.testing.assert_array_equal(host_region[4096:5120].view(np.float32), np.arange(256))


@need_torch
def test_torch_tensor_exposed(server, client_of):
    t = torch.arange(N // 8, dtype=torch.int64, device="cuda")
    server.expose("t", t)
    cli = client_of(server)
    np.testing.assert_array_equal(cli.read("t", dtype=np.int64), np.arange(N // 8))
    cpu = torch.zeros(N // 8, dtype=torch.int64)  # CPU tensor: DLPack, host memory
    cli.read("t", 0, out=cpu)
    assert torch.equal(cpu, t.cpu())


@need_cupy
def test_gpu_ring(ctxs, server, client_of):
    ring = remora.Ring(ctxs[0], 4096, 64, device=0)
    server.expose_ring("gr", ring)
    cli = client_of(server)
    sub = cli.subscribe("gr", timeout=5.0)
    for i in range(8):
        ring.push(cupy.full(4096, i, cupy.uint8))
    view = ring.reserve()
    assert isinstance(view, remora.DeviceView)
    cupy.asarray(view)[:] = 200
    cupy.cuda.Stream.null.synchronize()
    assert ring.commit() == 8
    out = cupy.empty(4096, cupy.uint8)
    for i in range(9):
        assert sub.next(out=out) is out and sub.seq == i
        assert int(out[0]) == (i if i < 8 else 200) and bool((out == out[0]).all())
    e = ring.newest()  # host copy of a GPU element
    assert bytes(e) == b"\xc8" * 4096


@need_cupy
def test_signals_seen_by_the_gpu(ctxs, server, client_of):
    """The words are mapped for the device: a CuPy array over device_ptr sees what a
    client's signal wrote, and a GPU write is seen by Signals.wait."""
    sig = remora.Signals(ctxs[0], 4)
    server.expose_signals("sig", sig)
    assert isinstance(sig.device_ptr, int) and sig.device_ptr != 0
    mem = cupy.cuda.UnownedMemory(sig.device_ptr, 4 * 8, sig)
    words = cupy.ndarray((4,), cupy.uint64, cupy.cuda.MemoryPointer(mem, 0))
    cli = client_of(server)
    cli.signal("sig", 2, 12345)
    cli.signal("sig", 2, 5, op="add")
    assert int(words[2]) == 12350
    words[1] = 77                        # a kernel writing the mapped host word
    cupy.cuda.Device().synchronize()
    assert sig.wait(1, 77, "eq", timeout=2.0) == 77
