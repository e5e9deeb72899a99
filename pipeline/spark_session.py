"""A SparkSession wired for Kafka: Spark's Kafka connector jars (resolved by Maven into
.cache/jars/spark, see java/spark-connector/pom.xml) go on ``spark.jars``, so no Ivy/--packages
download happens at run time.

Master: the ``master`` argument, else $SPARK_MASTER, else ``local[2]``. On a cluster the same jar list
is shipped to the executors by Spark itself (spark.jars). A local master binds the driver to
127.0.0.1 ($SPARK_LOCAL_IP, unless already set): everything runs in this process, and Spark otherwise
warns at every start that the hostname resolves to a loopback address and picks another interface. Defaults are sized for this project's small
machines and tests (2 shuffle partitions, no UI); callers override with ``conf``.

Who may call it: the driver program's main thread. SparkSession is process-wide (getOrCreate).
"""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

from tools.kafka_dist import SPARK_VERSION, jar_files

DEFAULT_MASTER = "local[2]"


def connector_jars() -> list[str]:
    return [str(p) for p in jar_files("spark")]


def build_session(app_name: str = "odradek-pipeline", master: str | None = None,
                  conf: dict[str, str] | None = None) -> SparkSession:
    import pyspark

    if pyspark.__version__ != SPARK_VERSION:
        raise RuntimeError(f"pyspark {pyspark.__version__} is installed but the connector jars are for Spark "
                           f"{SPARK_VERSION}; install pyspark=={SPARK_VERSION}")
    settings = {
        "spark.jars": ",".join(connector_jars()),
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        # State store maintenance and stats collection are pure overhead at demo/test sizes.
        "spark.sql.streaming.stateStore.maintenanceInterval": "600s",
        "spark.sql.adaptive.enabled": "false",
    }
    settings.update(conf or {})
    master = master or os.environ.get("SPARK_MASTER") or DEFAULT_MASTER
    if master.startswith("local"):
        # Read by the JVM pyspark is about to launch (it inherits this environment).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name).master(master)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "WARN"))
    return spark
