"""Where the report reads usage lines from: usage-log directories (``<state-dir>/usage`` of each proxy) and the usage
log's topic of a cluster (``kafka://HOST:PORT[,HOST:PORT...]/TOPIC``, which a fleet's members append to, ``[usage]
topic``), read in batch through Spark's Kafka source.

The topic's records are the lines of the files, keyed by their member; a line sent twice (a member stopped between
the cluster's acknowledgement and the write of its position) carries the same position header both times
(``POSITION_HEADER``) and the same bytes, and is read once. Spark's Kafka connector (``spark-sql-kafka-0-10``) is
resolved the way Spark resolves packages (``spark.jars.packages``, from Maven Central into Spark's Ivy cache, once),
without the jars Spark ships itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyspark
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from quotas.usage_record import POSITION_HEADER

KAFKA_SCHEME = "kafka://"
KAFKA_CONNECTOR = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
"""Spark's Kafka source of the Spark installed: ``--kafka-connector`` names another (Maven Central may not serve the
newest Spark's yet)."""
SHIPPED_WITH_SPARK = ("org.apache.hadoop:hadoop-client-runtime", "org.apache.hadoop:hadoop-client-api",
                      "at.yawk.lz4:lz4-java", "org.lz4:lz4-java", "org.xerial.snappy:snappy-java",
                      "org.slf4j:slf4j-api", "com.google.code.findbugs:jsr305",
                      "org.scala-lang.modules:scala-parallel-collections_2.13")
"""What the connector depends on and Spark has already (``spark.jars.excludes``): a second copy on the classpath, of
another version, is not resolved (about 50 MB)."""
_HOST_PORT = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")
_TOPIC = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")


class SourceError(ValueError):
    """A source the report cannot read, said plainly."""


@dataclass(frozen=True)
class UsageTopic:
    """``kafka://HOST:PORT[,HOST:PORT...]/TOPIC``."""

    bootstrap: str
    topic: str

    @classmethod
    def parse(cls, url: str) -> UsageTopic:
        rest = url[len(KAFKA_SCHEME):]
        bootstrap, _, topic = rest.partition("/")
        if not bootstrap or not all(_HOST_PORT.match(server) for server in bootstrap.split(",")):
            raise SourceError(f"{url}: expected kafka://HOST:PORT[,HOST:PORT...]/TOPIC")
        if not _TOPIC.match(topic):
            raise SourceError(f"{url}: {topic!r} is not a topic name (1 to 249 of letters, digits, '.', '_', '-')")
        return cls(bootstrap, topic)

    def __str__(self) -> str:
        return f"{KAFKA_SCHEME}{self.bootstrap}/{self.topic}"


@dataclass(frozen=True)
class Sources:
    directories: tuple[str, ...]
    topics: tuple[UsageTopic, ...]

    @classmethod
    def parse(cls, given: Sequence[str]) -> Sources:
        """Each of ``given`` a usage-log directory or a ``kafka://`` URL (raises SourceError)."""
        directories, topics = [], []
        for source in given:
            if source.startswith(KAFKA_SCHEME):
                topics.append(UsageTopic.parse(source))
            elif "://" in source:
                directories.append(source)  # a file system Spark reads (hdfs://, s3a://): it says what is wrong
            elif not Path(source).is_dir():
                raise SourceError(f"{source}: not a directory (nor kafka://HOST:PORT/TOPIC)")
            else:
                directories.append(source)
        return cls(tuple(directories), tuple(topics))


def read_kafka_config(path: Path) -> dict[str, str]:
    """A Kafka client properties file (as the ``--command-config`` of Kafka's tools: ``key=value`` lines, ``#``
    comments), as the options of Spark's Kafka source (``kafka.`` + key)."""
    options = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, separator, value = line.partition("=")
        if not separator or not key.strip():
            raise SourceError(f"{path}:{number}: expected key=value, got {line!r}")
        options[f"kafka.{key.strip()}"] = value.strip()
    return options


def with_kafka_connector(builder: SparkSession.Builder, connector: str) -> SparkSession.Builder:
    return (builder.config("spark.jars.packages", connector)
            .config("spark.jars.excludes", ",".join(SHIPPED_WITH_SPARK)))


def topic_lines(spark: SparkSession, topic: UsageTopic, schema: StructType, kafka_options: Mapping[str, str],
                since_s: int | None) -> DataFrame:
    """The topic's usage lines parsed as ``schema`` (a line that is not JSON of it gets ``_corrupt``), each line once.
    From ``since_s``'s hour on when given: a line is appended after its second, and the quotas in force are listed at
    the top of each hour."""
    # a fleet's topic has one partition: its offsets are read in as many ranges as Spark runs tasks at once, and the
    # lines are kept in as many parts (not in the 200 of the shuffle that drops a line sent twice)
    parallelism = str(spark.sparkContext.defaultParallelism)
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", topic.bootstrap)
              .option("subscribe", topic.topic).option("includeHeaders", "true").option("endingOffsets", "latest")
              .option("minPartitions", parallelism).options(**kafka_options))
    if since_s is None:
        reader = reader.option("startingOffsets", "earliest")
    else:  # where no record is as late, the end: nothing (not Spark's default, an error)
        reader = (reader.option("startingTimestamp", str((since_s - since_s % 3600) * 1000))
                  .option("startingOffsetsByTimestampStrategy", "latest"))
    records = reader.load()
    # (try_element_at: with ANSI SQL, Spark 4's default, indexing past an array's end fails the job)
    position: Column = F.expr(f"try_element_at(filter(headers, header -> header.key = '{POSITION_HEADER}'), 1).value")
    # a record of another writer, without a position, is a line of its own
    identity = F.coalesce(position, F.concat_ws(":", F.lit("record"), F.col("partition").cast("string"),
                                                F.col("offset").cast("string")).cast("binary"))
    # a line is known by its place and what it says: after a crash lost the end of a file the proxy had not synced,
    # other lines come to the same places
    once = (records.withColumn("line_identity", identity).dropDuplicates(["line_identity", "value"])
            .coalesce(int(parallelism)))
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}
    return once.select(F.from_json(F.col("value").cast("string"), schema, options).alias("line")).select("line.*")


def explained(error: Exception, topics: Sequence[UsageTopic], connector: str) -> str | None:
    """What went wrong reading ``topics``, said plainly, when ``error`` is one of the ways it goes wrong."""
    text = str(error)
    if "UnknownTopicOrPartitionException" in text:
        return f"no such topic: {' or '.join(map(str, topics))} (the cluster does not have it)"
    if "JAVA_GATEWAY_EXITED" in text or "unresolved dependency" in text:
        return (f"Spark's Kafka connector {connector} could not be resolved from Maven Central (Spark's output above "
                "says why): name one it serves with --kafka-connector (for Spark 4.x, "
                "org.apache.spark:spark-sql-kafka-0-10_2.13:VERSION), or reach Maven Central")
    if "Failed to find data source: kafka" in text:
        return f"Spark's Kafka connector is not on the classpath: give --kafka-connector (e.g. {connector})"
    return None
