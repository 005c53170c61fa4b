"""The DataFrame schema of the pykraft source: exactly Spark's Kafka source schema.

==============  ==================================  ==================================================
column          Spark type                          Arrow type sent by ``read()``
==============  ==================================  ==================================================
key             binary                              binary (null for a null key)
value           binary                              binary (null for a null value / tombstone)
topic           string                              string
partition       int                                 int32
offset          long                                int64
timestamp       timestamp                           timestamp[us, tz=UTC] (Kafka's ms times 1000)
timestampType   int                                 int32: 0 = CreateTime, 1 = LogAppendTime
headers         array<struct<key:string,            list<element: struct<key: string, value: binary>>
                value:binary>> (``includeHeaders``)
==============  ==================================  ==================================================

Every field is nullable, as in Spark's Kafka source and as ``to_arrow_schema`` produces: Spark
refuses a yielded ``pyarrow.RecordBatch`` whose schema differs in any way from
``to_arrow_schema(schema, timezone="UTC")`` — a unit test keeps the two equal.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])

_BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]

ARROW_TIMESTAMP = pa.timestamp("us", tz="UTC")
ARROW_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_HEADERS = pa.list_(pa.field("element", ARROW_HEADER))
_ARROW_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", ARROW_TIMESTAMP),
    pa.field("timestampType", pa.int32()),
]


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema, with ``headers`` last when ``includeHeaders`` is true."""
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE)))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of every batch ``read()`` yields; equal to ``to_arrow_schema(kafka_schema)``."""
    fields = list(_ARROW_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", ARROW_HEADERS))
    return pa.schema(fields)


def has_headers(schema: StructType) -> bool:
    return "headers" in schema.fieldNames()
