"""The Apache Kafka launcher's pure parts: node settings, SCRAM arguments, and what it says when it cannot run."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.dev import apache_kafka, kafka_jars
from proxy.dev.apache_kafka import KafkaNode, SaslUsers, new_cluster_id
from proxy.dev.kafka_jars import ClassSharing, KafkaUnavailable, kafka_libs


@pytest.fixture(autouse=True)
def fresh_java_lookup() -> Iterator[None]:
    kafka_jars.java_executable.cache_clear()
    yield
    kafka_jars.java_executable.cache_clear()


def kafka_scram_components(argument: str) -> dict[str, str]:
    """What Kafka's ScramParser makes of an ``--add-scram`` argument: ``MECH=[...]`` split at every comma."""
    mechanism, _, config = argument.partition("=")
    assert config.startswith("[") and config.endswith("]")
    return dict(component.split("=", 1) for component in config[1:-1].split(","))


@pytest.mark.parametrize(("mechanism", "digest"), [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")])
def test_a_password_with_commas_reaches_kafkas_scram_parser_whole(mechanism: str, digest: str) -> None:
    password = "carol, with = signs, and ] too"
    components = kafka_scram_components(apache_kafka._scram_argument(mechanism, "carol", password))
    assert set(components) == {"name", "salt", "saltedpassword", "iterations"}
    assert components["name"] == "carol"
    salt = base64.b64decode(components["salt"])
    # Kafka's ScramFormatter.saltedPassword: PBKDF2 over the password's UTF-8 bytes
    assert base64.b64decode(components["saltedpassword"]) == hashlib.pbkdf2_hmac(
        digest, password.encode(), salt, int(components["iterations"]))


def test_a_user_name_kafkas_parser_would_split_is_refused() -> None:
    with pytest.raises(ValueError, match="no ','"):
        apache_kafka._scram_argument("SCRAM-SHA-256", "a,b", "secret")


def test_a_combined_node_has_every_listener_and_plain_users_in_its_jaas_entry(tmp_path: Path) -> None:
    node = KafkaNode(tmp_path, 1, broker=True, controller=True, log_path=tmp_path / "kafka.log",
                     users=SaslUsers(plain={"bob": 'say "hi"'}))
    settings = node.properties("1@127.0.0.1:9", {"num.partitions": "3"})
    assert settings["process.roles"] == "broker,controller"
    assert settings["listeners"] == (f"PLAINTEXT://127.0.0.1:{node.plaintext_port},"
                                     f"SASL_PLAINTEXT://127.0.0.1:{node.sasl_port},"
                                     f"CONTROLLER://127.0.0.1:{node.controller_port}")
    assert 'user_bob="say \\"hi\\""' in settings["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert settings["num.partitions"] == "3"
    assert "GSSAPI" not in settings["sasl.enabled.mechanisms"]


def test_a_controller_alone_listens_only_for_the_quorum(tmp_path: Path) -> None:
    node = KafkaNode(tmp_path, 3000, broker=False, controller=True, log_path=tmp_path / "kafka.log", users=SaslUsers())
    settings = node.properties("3000@127.0.0.1:9", {})
    assert settings["process.roles"] == "controller"
    assert settings["listeners"] == f"CONTROLLER://127.0.0.1:{node.controller_port}"
    assert "PLAINTEXT:PLAINTEXT" in settings["listener.security.protocol.map"]  # Kafka checks it even here
    with pytest.raises(AssertionError, match="not a broker"):
        _ = node.bootstrap


def test_cluster_ids_are_made_as_kafka_makes_them() -> None:
    for _ in range(2000):  # one in 64 would start with '-'
        cluster_id = new_cluster_id()
        assert len(cluster_id) == 22 and "=" not in cluster_id and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_without_java_it_stops_at_once_and_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(KafkaUnavailable, match="needs Java.*apt install openjdk-17-jre-headless.*KAFKA_BOOTSTRAP"):
        kafka_jars.java_executable()


def test_without_maven_the_first_run_stops_at_once_and_names_the_fix(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("KAFKA_QUOTA_PROXY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(KafkaUnavailable, match="needs Maven.*apt install"):
        kafka_libs()
    assert not (tmp_path / "cache" / f"apache-kafka-{kafka_jars.KAFKA_VERSION}" / "lib").exists()


def written_at_exit(sharing: ClassSharing) -> Path | None:
    """Where the JVM of ``sharing``'s run writes the class archive at its exit (None: it maps one)."""
    for option in sharing.options:
        if option.startswith("-XX:ArchiveClassesAtExit="):
            return Path(option.partition("=")[2])
    return None


def test_the_tools_class_archive_comes_from_a_run_that_succeeded_and_is_used_after(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text('#!/bin/sh\necho \'openjdk version "17.0.9"\' >&2\n')
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    libs = tmp_path / "kafka" / "lib"
    libs.mkdir(parents=True)
    assert ClassSharing.mapped(libs) == []  # a run that may not write it: none until one is made
    kept, failed = ClassSharing(libs), ClassSharing(libs)
    for sharing, content in ((kept, b"classes"), (failed, b"half")):
        written = written_at_exit(sharing)
        assert written is not None and "-Xlog:cds*=off" in sharing.options  # its warnings are no tool's output
        written.write_bytes(content)
    failed.done(False)
    assert set(libs.parent.iterdir()) == {libs, written_at_exit(kept)}, "a failed run's archive is not kept"
    kept.done(True)
    (archive,) = libs.parent.glob("*.jsa")
    assert archive.read_bytes() == b"classes" and not list(libs.parent.glob("*.partial"))
    assert ClassSharing(libs).options == ClassSharing.mapped(libs) == ["-Xlog:cds*=off",
                                                                       f"-XX:SharedArchiveFile={archive}"]
    os.utime(java, ns=(0, java.stat().st_mtime_ns + 1))  # another JDK in the same place: an archive of its own
    assert written_at_exit(ClassSharing(libs)) is not None
