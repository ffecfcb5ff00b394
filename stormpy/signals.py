"""SIGTERM / SIGINT -> a stop event: the one way every stormpy process turns a signal into a stop.

Nimbus, the supervisor, workers, the UI, ``stormpy dev-zookeeper`` and ``stormpy local`` all
run the same shape of main thread: install handlers, start the daemon, wait for the stop
event, stop the daemon with a reason, restore the old handlers. ``StopOnSignals`` is that
shape, so each entry point writes only what is its own::

    with StopOnSignals(who="supervisor") as signals:
        supervisor = Supervisor(conf).start()
        signals.wait()
    supervisor.stop(reason=signals.reason("supervisor exiting"))

The handler only sets an event and records which signal came (Python runs handlers on the
main thread between bytecodes, so anything slower belongs to the code that waits). Python
allows handlers to be installed from the main thread only; elsewhere (a test calling a
``run_*`` function from a thread) the object is a plain stop event and says so in the log.
"""
from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopOnSignals:
    """Context manager: while active, SIGTERM and SIGINT set ``stop`` (and record the signal).

    ``announce(message)`` is told about the first signal (default: the log; ``stormpy local``
    prints to the terminal instead). With ``second_signal_kills`` a second signal restores the
    default handler, so a third one (or the re-sent signal) ends a process stuck in shutdown.
    """

    def __init__(self, stop: threading.Event | None = None, *, who: str = "stormpy",
                 announce: Callable[[str], None] | None = None, second_signal_kills: bool = False) -> None:
        self.stop = stop if stop is not None else threading.Event()
        self.who = who
        self.announce = announce
        self.second_signal_kills = second_signal_kills
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if self.stop.is_set() and self.received is not None and self.second_signal_kills:
            signal.signal(signum, signal.SIG_DFL)
            return
        self.received = self.received or name
        message = f"{self.who}: {name} received, stopping"
        if self.announce is not None:
            self.announce(message)
        else:
            log.info("%s", message)
        self.stop.set()

    def __enter__(self) -> "StopOnSignals":
        if threading.current_thread() is not threading.main_thread():
            log.debug("%s: not on the main thread; signals are not handled here", self.who)
            return self
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def wait(self, poll_secs: float = 1.0, alive: Callable[[], bool] | None = None) -> bool:
        """Block until a stop is requested (True) or ``alive()`` turns False (False).

        Polls so that the main thread keeps running signal handlers promptly.
        """
        while not self.stop.wait(poll_secs):
            if alive is not None and not alive():
                return False
        return True

    def reason(self, otherwise: str) -> str:
        """What to pass as a stop reason: the signal that came, or ``otherwise``."""
        return f"{self.received} received" if self.received else otherwise
