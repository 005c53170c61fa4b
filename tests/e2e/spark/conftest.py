"""Fixtures for the Spark source's end-to-end tests: ONE SparkSession for the whole run, and brokers.

A SparkSession takes ~7 s to start and the first Python-source query ~5 s more (measured here), so every
Spark test shares the session-scoped ``spark`` fixture, local[2] on 127.0.0.1 with the venv's
Python on the workers. The session starts before any broker of the test process, so that the
fork that launches Spark's JVM copies no listener threads.

``fake_cluster`` is a fresh in-memory ``FakeCluster`` (Kafka listeners, see fake_brokers.py) per
test; it depends on ``spark`` for the start-up order above.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_brokers import FakeCluster


@pytest.fixture(scope="session")
def spark():
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark import register_spark_source

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pykraft-spark-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        # Python workers connect back to the JVM within this time (default 15 s): too short when
        # the 2-core machine runs several agents' tests at once.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register_spark_source(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def fake_cluster(spark) -> Iterator[FakeCluster]:
    cluster = FakeCluster()
    try:
        yield cluster
    finally:
        cluster.stop()
