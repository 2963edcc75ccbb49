# SPDX-License-Identifier: BSD-3-Clause
"""remora: remote memory regions, rings and GPU buffers over UCX.

    import remora, numpy as np

    with remora.Context() as ctx:
        cli = remora.Client(ctx, "127.0.0.1:60010")
        frame = cli.read("frames", 0, out=np.empty((480, 640), np.uint16))
        for elem in cli.subscribe("camera", timeout=1.0):
            img = np.frombuffer(elem, np.uint16).reshape(480, 640)

Every blocking call releases the GIL and is bounded by the client's timeout.
Errors are remora.Error subclasses carrying .status (see docs/python.md).
"""
import logging as _logging
import threading as _threading
import traceback as _traceback

from . import _remora
from ._remora import (  # noqa: F401  (re-exported)
    DEFAULT_TIMEOUT_MS, NAME_MAX, TOKEN_MAX, TOKEN_MIN,
    AddressError, AuthError, Busy, Canceled, Closed, ConnectionRefused, DeviceView,
    Disconnected, Element, Error, Event, Exists, InvalidParam, IOError, Memory, NoMemory,
    NotFound, OutOfRange, ProtocolError, ReadOnly, RegionInfo, Request, Ring, Server,
    Signals, SlotContext, Subscription, TimedOut, TransportError, Unsupported, VersionError,
    cuda_info, library_version, status_string,
)

__version__ = "0.1.0"

__all__ = [
    "Context", "Memory", "Server", "Client", "Request", "Ring", "Signals", "Subscription",
    "Element",
    "CallbackSubscription", "DeviceView", "RegionInfo", "Event", "SlotContext",
    "Error", "InvalidParam", "NoMemory", "TimedOut", "Disconnected", "NotFound", "OutOfRange",
    "ReadOnly", "AuthError", "ProtocolError", "Unsupported", "ConnectionRefused",
    "AddressError", "Exists", "IOError", "TransportError", "Canceled", "Busy", "VersionError",
    "Closed", "cuda_info", "library_version", "status_string",
]

# How often the helper threads look at their stop flag, seconds.
_POLL = 0.1


def _log_handler(log):
    """log= of Context as a callable (level, where, msg), or None."""
    if log is None or log is False:
        return None
    if log is True:
        log = _logging.getLogger("remora")
    if isinstance(log, _logging.Logger):
        logger = log
        return lambda level, where, msg: logger.log(level, "%s", msg,
                                                    extra={"remora_where": where})
    if callable(log):
        return log
    raise TypeError("log must be a logging.Logger, a callable (level, where, msg), "
                    "True or None")


class Context(_remora.Context):
    __doc__ = _remora.Context.__doc__.split("\nlog:")[0] + (
        "\nlog: where the library's log lines go instead of stderr: True (the "
        "'remora' logger), a logging.Logger, or a callable fn(level, where, msg) with "
        "level numbered as logging's (ERROR, WARNING, INFO, DEBUG) and where the C "
        "source line. It runs on a Python thread of this context; lines of a failing "
        "Context() reach it before the exception, and those of close() before close "
        "returns. REMORA_LOG (error, warn, info, debug; default warn) picks which lines "
        "exist at all. The lines are the process's: the Context made last with log= "
        "gets them all (those of other contexts too) while it is open.")

    def __init__(self, name=None, *, log=None, **kwargs):
        self._log = _log_handler(log)
        self._log_stop = _threading.Event()
        self._log_thread = None
        self._log_dropped = 0
        try:
            super().__init__(name, log=self._log is not None, **kwargs)
        except Error:
            self._drain_log()
            raise
        self._start_log_thread()

    def _start_log_thread(self):
        if self._log is None:
            return
        self._log_stop.clear()
        self._log_thread = _threading.Thread(target=self._deliver_log, name="remora-log",
                                             daemon=True)
        self._log_thread.start()

    def _stop_log_thread(self):
        t, self._log_thread = self._log_thread, None
        if t is not None and t is not _threading.current_thread():
            self._log_stop.set()
            t.join()

    def _emit(self, line):
        dropped = self.logs_dropped
        if dropped != self._log_dropped:
            lost, self._log_dropped = dropped - self._log_dropped, dropped
            self._emit((_logging.WARNING, "remora/__init__.py",
                        f"{lost} log lines dropped: the log handler fell behind"))
        try:
            self._log(*line)
        except Exception:  # a broken handler must not stop the lines after it
            _traceback.print_exc()

    def _deliver_log(self):
        while not self._log_stop.is_set():
            line = self.next_log(_POLL)
            if line is not None:
                self._emit(line)

    def _drain_log(self):
        if self._log is None:
            return
        while (line := self.next_log()) is not None:
            self._emit(line)

    def close(self):
        """Close every object made from this context, then the context, and stop
        the log thread (after handing it the lines of the close). Idempotent."""
        self._stop_log_thread()
        try:
            super().close()
        except Error:  # Busy: still open, so the lines keep coming
            self._start_log_thread()
            raise
        finally:
            self._drain_log()

    def __exit__(self, *exc):
        self.close()


class CallbackSubscription:
    """A subscription whose elements are handed to a callback on a Python thread.

    Made by Client.subscribe(..., callback=fn). fn(elem) runs for each Element;
    when the subscription ends on an error (server gone, ring removed), on_error(exc)
    runs once (if given) and .error holds it. close() stops and joins the thread.
    """

    def __init__(self, sub, callback, on_error=None):
        self.subscription = sub
        self.error = None
        self._callback = callback
        self._on_error = on_error
        self._stop = _threading.Event()
        self.thread = _threading.Thread(target=self._run, name=f"remora-sub-{sub!r}",
                                        daemon=True)
        self.thread.start()

    def _run(self):
        sub = self.subscription
        while not self._stop.is_set():
            try:
                elem = sub.next(timeout=_POLL)
            except TimedOut:
                continue
            except Error as exc:
                if not self._stop.is_set():
                    self.error = exc
                    if self._on_error is not None:
                        self._on_error(exc)
                return
            self._callback(elem)

    def close(self):
        self._stop.set()
        if _threading.current_thread() is not self.thread:
            self.thread.join()
        self.subscription.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Client(_remora.Client):
    __doc__ = _remora.Client.__doc__ + (
        "\n\non_event: a callable run on a Python thread for each Event "
        "(region_changed, region_removed, disconnected). Without it, take events "
        "with next_event() or poll event_fd.")

    def __new__(cls, context, address, *, on_event=None, **kwargs):
        self = super().__new__(cls, context, address, **kwargs)
        self._event_stop = _threading.Event()
        self._event_thread = None
        if on_event is not None:
            self._event_thread = _threading.Thread(
                target=self._deliver_events, args=(on_event,),
                name=f"remora-events-{address}", daemon=True)
            self._event_thread.start()
        return self

    def _deliver_events(self, on_event):
        while not self._event_stop.is_set():
            ev = self.next_event(_POLL)
            if ev is not None:
                on_event(ev)
            elif self.closed:
                return

    def subscribe(self, name, mode="every", *, timeout=None, batch_bytes=None,
                  callback=None, on_error=None):
        """subscribe(name, mode='every', *, timeout=None, batch_bytes=None, callback=None,
        on_error=None)

        Follow a remote ring. Without callback: a Subscription, an iterator of
        Elements (each step waits up to timeout seconds, None: the client's
        timeout, then raises TimedOut). With callback: a CallbackSubscription
        calling callback(elem) on a Python thread.
        """
        sub = super().subscribe(name, mode, timeout=timeout, batch_bytes=batch_bytes)
        if callback is None:
            return sub
        return CallbackSubscription(sub, callback, on_error)

    def close(self):
        """Disconnect (and stop the on_event thread). Idempotent."""
        self._event_stop.set()
        t = self._event_thread
        if t is not None and t is not _threading.current_thread():
            t.join()
        super().close()

    def __exit__(self, *exc):
        self.close()
