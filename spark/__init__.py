"""PySpark Python Data Source for pykraft (format "pykraft"): ``from spark import register_spark_source``.

See ``spark.source`` for the user contract (Spark's Kafka source options and schema) and
``spark.client`` for how workers reach the brokers.
"""

from spark.source import FORMAT_NAME, register_spark_source

__all__ = ["FORMAT_NAME", "register_spark_source"]
