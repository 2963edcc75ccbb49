# SPDX-License-Identifier: BSD-3-Clause
"""A raw HTTP request to `remora serve --metrics` on 127.0.0.1, for test_obs.sh."""
import socket


def http(port, raw, timeout=10):
    """Send raw, read the answer to its end (the server closes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered and closed before taking it all
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            out += b
        return out
    finally:
        s.close()


def status(resp):
    return int(resp.split(b" ", 2)[1]) if resp.startswith(b"HTTP/1.0 ") else None


def get_metrics(port, extra=b"", timeout=10):
    """GET /metrics with extra header lines: (status, whole response)."""
    r = http(port, b"GET /metrics HTTP/1.0\r\n" + extra + b"\r\n", timeout)
    return status(r), r
