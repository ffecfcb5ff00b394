"""PySpark sink: bolts that hand batches of tuples to Spark (DESIGN section 7, issue 5).

``from stormpy.spark import SparkSinkBolt``; Trident's exactly-once Spark state is
``stormpy.spark.SparkState`` (users import it as ``stormpy.trident.SparkState``). The imports are
lazy so that code which only needs the pure settings (``stormpy.spark.settings``, used by
validation) does not load PySpark.
"""
from __future__ import annotations

from typing import Any

__all__ = ["SparkSinkBolt"]   # SparkState is documented where users meet it: stormpy.trident


def __getattr__(name: str) -> Any:
    if name == "SparkSinkBolt":
        from stormpy.extras import require

        require("spark", "SparkSinkBolt")
        from stormpy.spark.sink import SparkSinkBolt

        return SparkSinkBolt
    if name == "SparkState":
        from stormpy.spark.trident_state import SparkState

        return SparkState
    raise AttributeError(f"module 'stormpy.spark' has no attribute {name!r}")
