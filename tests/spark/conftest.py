"""One real local SparkSession for every Spark test module (a cold start costs 5-10 s here).

The fixture holds a reference on the process-wide session (``stormpy.spark.session``), so the
sinks under test share it and their ``close`` never stops it; it is stopped when the last
Spark test has run, also after failures.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from stormpy.spark import session as spark_session

SPARK_TEST_CONF: dict[str, Any] = {
    "spark.master": "local[2]",
    "spark.ui.enabled": False,
    "spark.sql.shuffle.partitions": 2,
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = spark_session.acquire_session({**SPARK_TEST_CONF, "spark.sql.warehouse.dir": str(warehouse)})
    try:
        yield session
    finally:
        spark_session.release_session("Spark tests finished")
        assert not spark_session.is_session_active()


@pytest.fixture
def spark_conf() -> dict[str, Any]:
    """The settings the shared session runs with; topologies under test pass them so their sinks
    join that session without 'other settings' warnings."""
    return dict(SPARK_TEST_CONF)
