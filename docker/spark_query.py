"""The compose file's ``spark`` service: one PySpark batch query over a topic's committed records.

    docker compose --profile spark run --rm spark [TOPIC]

Reads ``TOPIC`` (default ``$PYKRAFT_SPARK_TOPIC``, else ``demo``) through the ``pykraft`` data
source from the brokers in ``$PYKRAFT_BOOTSTRAP_SERVERS`` and prints, per partition, the number of
records, the offset range and the total value bytes — only committed records (below the high
watermark) are ever read. Spark runs in local mode inside this container, bound to 127.0.0.1.
Exits 2 with one line naming the problem when the topic cannot be read.
"""

from __future__ import annotations

import os
import sys

EXIT_ERROR = 2


def main(argv: list[str]) -> int:
    topic = argv[0] if argv else os.environ.get("PYKRAFT_SPARK_TOPIC", "demo")
    bootstrap = os.environ.get("PYKRAFT_BOOTSTRAP_SERVERS", "127.0.0.1:29092")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark import register_spark_source

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pykraft-compose-query")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        register_spark_source(spark)
        reader = spark.read.format("pykraft").option("bootstrap.servers", bootstrap)
        df = reader.option("subscribe", topic).load()
        rows = (
            df.groupBy("partition")
            .agg(
                F.count("*").alias("records"),
                F.min("offset").alias("first_offset"),
                F.max("offset").alias("last_offset"),
                F.sum(F.length("value")).alias("value_bytes"),
            )
            .orderBy("partition")
            .collect()
        )
    except Exception as exc:  # a bad option or an unreachable cluster: one line, no JVM trace
        print(
            f"spark_query: error: cannot read topic {topic!r} from {bootstrap}: {exc}".splitlines()[0],
            file=sys.stderr,
        )
        return EXIT_ERROR
    finally:
        spark.stop()
    print(f"topic {topic!r} via {bootstrap}")
    print(f"{'partition':>9} {'records':>8} {'first':>8} {'last':>8} {'bytes':>10}")
    for r in rows:
        print(
            f"{r['partition']:>9} {r['records']:>8} {r['first_offset']:>8} {r['last_offset']:>8} "
            f"{r['value_bytes']:>10}"
        )
    print(f"total {sum(r['records'] for r in rows)} committed records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
