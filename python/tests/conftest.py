# SPDX-License-Identifier: BSD-3-Clause
"""Fixtures: in-process servers (two Contexts) and `remora serve` processes.

The remora command is REMORA_BIN, else ../../build/tools/remora from here.
Servers started here die with the test process (PR_SET_PDEATHSIG) and are
killed at the end of each test.
"""
import ctypes
import os
import select
import signal
import subprocess
import time

import numpy as np
import pytest

import remora

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def remora_bin():
    path = os.environ.get("REMORA_BIN") or os.path.join(REPO, "build", "tools", "remora")
    if not os.access(path, os.X_OK):
        pytest.fail(f"remora command not found at {path} (set REMORA_BIN)")
    return path


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Proc:
    """A `remora ...` child printing 'listening HOST:PORT'."""

    def __init__(self, args, tmp_path, env=None):
        self.log = open(tmp_path / f"server-{os.getpid()}-{time.monotonic_ns()}.log", "w+")
        self.p = subprocess.Popen([remora_bin()] + args, stdout=subprocess.PIPE,
                                  stderr=self.log, preexec_fn=_die_with_parent,
                                  env=dict(os.environ, **(env or {})))
        self.addr = self._listening(30.0)

    def _listening(self, timeout):
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                self.kill()
                raise RuntimeError(f"no 'listening' line: {self.logtext()}")
            ch = os.read(self.p.stdout.fileno(), 1)
            if not ch:
                self.kill()
                raise RuntimeError(f"server exited: {self.logtext()}")
            line += ch
        words = line.decode().split()
        assert words[0] == "listening", line
        return words[1]

    def logtext(self):
        self.log.seek(0)
        return self.log.read()

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            self.p.wait(10)

    def close(self):
        self.kill()
        self.p.stdout.close()
        self.log.close()


@pytest.fixture
def spawn(tmp_path):
    procs = []

    def start(*args, env=None):
        p = Proc(list(args), tmp_path, env)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.close()


@pytest.fixture
def ctxs():
    """(server context, client context): over worker addresses a client cannot use its
    server's context (test_own_servers_context)."""
    s, c = remora.Context(name="test-server"), remora.Context(name="test-client")
    yield s, c
    c.close()
    s.close()


@pytest.fixture
def server(ctxs):
    srv = remora.Server(ctxs[0])
    yield srv
    srv.close()


@pytest.fixture
def client_of(ctxs):
    made = []

    def connect(srv_or_addr, **kw):
        addr = srv_or_addr if isinstance(srv_or_addr, str) else srv_or_addr.address
        kw.setdefault("timeout", 5.0)
        c = remora.Client(ctxs[1], addr, **kw)
        made.append(c)
        return c

    yield connect
    for c in made:
        c.close()


def pattern(offset, length):
    """The bytes `remora serve --region NAME=SIZE:pattern` holds at [offset, offset+length)."""
    first, last = offset // 8, (offset + length + 7) // 8
    z = np.arange(first, last, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    b = z.astype("<u8").view(np.uint8)
    start = offset - first * 8
    return b[start:start + length]
