# SPDX-License-Identifier: BSD-3-Clause
"""Context(log=...): the library's log lines handed to Python instead of stderr."""
import logging
import threading
import time

import pytest

import remora

TOKEN = b"0123456789abcdef-secret"


def wait_for(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def bad_token_client(ctx, srv):
    """A client with the wrong token: the server logs a warning about it."""
    with pytest.raises(remora.AuthError):
        remora.Client(ctx, srv.address, token=b"x" * 16, timeout=3)


def log_threads():
    return [t for t in threading.enumerate() if t.name == "remora-log" and t.is_alive()]


def test_failed_create_lines_reach_the_handler_before_the_exception():
    lines = []
    with pytest.raises(remora.InvalidParam):
        remora.Context(heartbeat_ms=500, peer_timeout_ms=100,
                       log=lambda *line: lines.append(line))
    assert len(lines) == 1
    level, where, msg = lines[0]
    assert level == logging.ERROR
    assert where.startswith("engine.c:")
    assert "peer timeout" in msg
    assert log_threads() == []


def test_lines_go_to_a_logger(caplog):
    caplog.set_level(logging.WARNING, logger="remora.test")
    with remora.Context(name="client") as cctx, \
            remora.Context(name="server", log=logging.getLogger("remora.test")) as sctx:
        with remora.Server(sctx, token=TOKEN) as srv:
            bad_token_client(cctx, srv)
            assert wait_for(lambda: any("failed authentication" in r.getMessage()
                                        for r in caplog.records))
    rec = next(r for r in caplog.records if "failed authentication" in r.getMessage())
    assert rec.name == "remora.test"
    assert rec.levelno == logging.WARNING
    assert rec.remora_where.startswith("server.c:")
    assert log_threads() == []


def test_true_means_the_remora_logger(caplog):
    caplog.set_level(logging.WARNING, logger="remora")
    with remora.Context(name="client") as cctx, remora.Context(log=True) as sctx:
        with remora.Server(sctx, token=TOKEN) as srv:
            bad_token_client(cctx, srv)
            assert wait_for(lambda: any(r.name == "remora" and
                                        "failed authentication" in r.getMessage()
                                        for r in caplog.records))


def test_a_raising_handler_does_not_stop_the_lines(capsys):
    seen = []

    def handler(level, where, msg):
        seen.append(msg)
        if len(seen) == 1:
            raise RuntimeError("handler bug")

    with remora.Context(name="client") as cctx, remora.Context(log=handler) as sctx:
        with remora.Server(sctx, token=TOKEN) as srv:
            bad_token_client(cctx, srv)
            assert wait_for(lambda: len(seen) >= 1)
            bad_token_client(cctx, srv)
            assert wait_for(lambda: sum("failed authentication" in m for m in seen) >= 2)
    assert "handler bug" in capsys.readouterr().err


def test_close_stops_the_thread_and_lines_return_to_stderr():
    seen = []
    ctx = remora.Context(log=lambda *line: seen.append(line))
    assert len(log_threads()) == 1
    ctx.close()
    ctx.close()  # idempotent
    assert log_threads() == []
    assert ctx.closed
    assert ctx.logs_dropped == 0
    assert ctx.next_log() is None


def test_bad_log_argument():
    with pytest.raises(TypeError):
        remora.Context(log=42)


def test_without_log_nothing_is_queued():
    with remora.Context() as ctx:
        assert ctx.next_log(0.05) is None
        assert ctx.logs_dropped == 0
