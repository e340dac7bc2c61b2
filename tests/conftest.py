"""Settings every test relies on, whatever shell started pytest.

A shell without job control (``bash -c 'pytest ... &'``, a CI script's background step)
starts its background commands with SIGINT ignored, and Python then leaves it ignored:
the Ctrl-C tests would see no KeyboardInterrupt at all, and the processes they start
would inherit the ignored signal. Restoring Python's own handler here also gives those
children the default disposition (a caught signal is reset on exec).
"""

from __future__ import annotations

import signal

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
