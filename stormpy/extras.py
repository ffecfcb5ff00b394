"""Optional features and the pip extra that installs each (issue 28: a light core).

The core distribution (``stormpy-streams``) carries the engine, ZooKeeper, Thrift, ZeroMQ
and the CLI. PySpark (300+ MB and a JVM), Redis and Kafka clients are extras, so a laptop
word count does not pull them. Code that needs one calls :func:`require` where the feature is
first used (building a ``SparkState``, opening a Redis store), and a missing module becomes
one line naming the extra, never an ``ImportError`` traceback from deep inside a worker.

Threads: pure functions, safe from any thread.
"""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from stormpy.errors import UserError

DISTRIBUTION = "stormpy-streams"

# extra -> the top-level modules it provides (what `require` checks)
EXTRAS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "pyarrow", "pandas"),
    "redis": ("redis",),
    "kafka": ("confluent_kafka",),
    "connect": ("pyspark", "grpc"),
}


class MissingExtra(UserError):
    """A feature was used without the extra that installs it; the message is the whole fix."""


def for_missing_module(exc: ModuleNotFoundError, feature: str) -> MissingExtra | None:
    """The MissingExtra for an ImportError of a module an extra provides (``import pyspark`` in a
    topology file without the spark extra), else None."""
    top = (exc.name or "").split(".")[0]
    for extra in ("spark", "redis", "kafka"):
        if top in EXTRAS[extra]:
            return MissingExtra(f"{feature} needs the {extra!r} extra ({top} is not installed): {install_hint(extra)}")
    return None


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'stormpy-streams[spark]'``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def is_installed(extra: str) -> bool:
    """Whether every module of ``extra`` can be imported (without importing it)."""
    return all(importlib.util.find_spec(name) is not None for name in EXTRAS[extra])


def require(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtra` naming ``extra`` when one of its modules is absent."""
    for name in EXTRAS[extra]:
        if importlib.util.find_spec(name) is None:
            raise MissingExtra(f"{feature} needs the {extra!r} extra ({name} is not installed): "
                               f"{install_hint(extra)}")


def import_module(extra: str, name: str, feature: str) -> ModuleType:
    """``importlib.import_module(name)``, or :class:`MissingExtra` naming ``extra``."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == name.split(".")[0]:
            raise MissingExtra(f"{feature} needs the {extra!r} extra ({exc.name} is not installed): "
                               f"{install_hint(extra)}") from None
        raise
