"""A pytest plugin: librdkafka's log lines reach Python logging (logger ``librdkafka``), not fd 2.

librdkafka writes its log lines ("%3|1700000000.123|FAIL|rdkafka#producer-1| ... Connection refused")
to stderr from its own threads. pytest lets fd 2 through between a test's phases, so a client still
alive after its test - a module's producer, one a failed test's traceback keeps - wrote into the
progress dots, into the next tests' captured output, and after the session ("Producer terminating
with 1 message still in queue"). Given the ``logger`` setting, confluent-kafka hands each line to that
Python logger when the application polls the client (poll, flush, consume): a test's own client
logs into its "Captured log" section (WARNING and above, so a failure still shows the client's
errors), and a client nobody polls any more stays silent.

The default is set for every Producer, Consumer and AdminClient the test process creates, before any
test module imports them: Producer and Consumer (C types, which take no new attributes) are replaced
by subclasses whose constructor adds ``logger`` unless the caller passed one; AdminClient, a Python
class whose own ``__init__`` names itself in ``super(AdminClient, self)``, gets that constructor
wrapped in place (a subclass under its name would recurse there). Clients in subprocesses write to
wherever their stderr goes.
"""

from __future__ import annotations

import logging
from typing import Any

LOGGER = logging.getLogger("librdkafka")


def _with_logger(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with logger=LOGGER unless the config (a dict first argument, or the kwargs) has one."""
    config = args[0] if args and isinstance(args[0], dict) else {}
    if "logger" not in kwargs and "logger" not in config:
        kwargs["logger"] = LOGGER
    return kwargs


def _subclass_logging_to_python(cls: type) -> type:
    class Client(cls):  # type: ignore[valid-type, misc]  # a class chosen at run time
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **_with_logger(args, kwargs))

    Client.__name__ = Client.__qualname__ = cls.__name__
    Client.__module__ = cls.__module__
    return Client


def _init_logging_to_python(cls: type) -> None:
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **_with_logger(args, kwargs))

    cls.__init__ = __init__  # type: ignore[misc]


def install() -> None:
    """Replace the client classes (once) in confluent_kafka and confluent_kafka.admin."""
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError:  # the test extra is not installed: no librdkafka client to quiet
        return
    if getattr(confluent_kafka, "_odradek_logging", False):
        return
    confluent_kafka.Producer = _subclass_logging_to_python(confluent_kafka.Producer)
    confluent_kafka.Consumer = _subclass_logging_to_python(confluent_kafka.Consumer)
    _init_logging_to_python(confluent_kafka.admin.AdminClient)
    confluent_kafka._odradek_logging = True  # type: ignore[attr-defined]


def pytest_configure(config: Any) -> None:
    install()
