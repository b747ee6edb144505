"""What ``kafka-quota-proxy report`` is told to read (``pipeline.sources``, ``--since``/``--until``): bad input is
refused with what is wrong, before Spark starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.job import main
from pipeline.sources import SourceError, Sources, UsageTopic, read_kafka_config


def test_directories_and_topics_are_told_apart_and_a_bad_one_named(tmp_path: Path) -> None:
    given = Sources.parse([str(tmp_path), "kafka://a:9092,b:9093/__kafka_quota_proxy_usage_log"])
    assert given == Sources((str(tmp_path),), (UsageTopic("a:9092,b:9093", "__kafka_quota_proxy_usage_log"),))
    for url, reason in (("kafka://a:9092", "not a topic name"), ("kafka://a:9092/", "not a topic name"),
                        ("kafka:///usage", "expected kafka://HOST:PORT"), ("kafka://a/usage", "expected kafka://"),
                        ("kafka://a:9092/bad topic", "not a topic name")):
        with pytest.raises(SourceError, match=reason):
            Sources.parse([url])
    with pytest.raises(SourceError, match="not a directory"):
        Sources.parse([str(tmp_path / "missing")])


def test_the_kafka_clients_properties_become_the_sources_options(tmp_path: Path) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text("# TLS and SASL\nsecurity.protocol=SASL_SSL\n\nsasl.mechanism = PLAIN\n"
                          'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                          'username="a" password="b=c";\n')
    assert read_kafka_config(properties) == {
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" '
                                  'password="b=c";'}
    properties.write_text("security.protocol\n")
    with pytest.raises(SourceError, match="client.properties:1: expected key=value"):
        read_kafka_config(properties)


@pytest.mark.parametrize(("arguments", "message"), [
    (["--usage", "kafka://host/usage"], "--usage kafka://host/usage: expected kafka://HOST:PORT"),
    (["--usage", "nowhere"], "--usage nowhere: not a directory"),
    (["--since", "yesterday"], "--since: 'yesterday': expected a UTC time"),
    (["--since", "2026-11-28T15:00", "--until", "2026-11-28T14:00Z"], "--since must be before --until"),
    (["--kafka-config", "missing.properties"], "--kafka-config missing.properties: no such file"),
])
def test_bad_arguments_are_refused_before_spark_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       arguments: list[str], message: str) -> None:
    usage = [] if "--usage" in arguments else ["--usage", str(tmp_path)]
    with pytest.raises(SystemExit) as exited:
        main([*usage, *arguments, "--out", str(tmp_path / "out")])
    assert exited.value.code == 2 and message in capsys.readouterr().err
