"""Durable state under faults (issue 14): one owner per state directory, a disk that fills up and
frees again while traffic flows, the proxy's own answers under backpressure, a cluster that stops
answering. Each test reproduces a failure seen before the fix."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from allocator.ledger import read_ledger_file
from proxy.dev.apache_kafka import KafkaCluster
from proxy.state.pid_ledger import RETRY_MAX_S
from tests.support import (
    FOREIGN_PRODUCER_ID,
    Cluster,
    ProxyProcess,
    admin_config,
    call,
    connect_to_leader,
    create_topic_on_one_broker,
    encode_request,
    produce_request,
    read_frame,
    read_to_end,
    record_batch,
    wait_until,
)

DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
METADATA = 3
INVALID_REQUEST = 42


def write_errors(proxy: ProxyProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/metrics", timeout=30) as response:
        page = response.read().decode()
    return {store: float(value) for store, value in
            re.findall(r'kafka_quota_proxy_state_write_errors_total\{store="([^"]+)"\} (\S+)', page)}


def rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]


def wait_until_idle(pid: int, timeout_s: float = 30.0) -> None:
    """Until the process has used no CPU for half a second (it has done all it will do for now)."""
    def cpu_ticks() -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    deadline = time.monotonic() + timeout_s
    last = cpu_ticks()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpu_ticks()
        if now == last:
            return
        last = now
    raise AssertionError(f"process {pid} still busy after {timeout_s} s")


def test_a_second_proxy_on_the_same_state_directory_exits_2(own_proxy, broker: Cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two proxies given one state directory handed out the same producer-ID block (2^48)."""
    first = own_proxy()
    assert first.process is not None
    second = ProxyProcess(broker.bootstrap, tmp_path / "second.log", "--state-dir", str(first.state_dir),
                          node_ids=broker.node_ids)
    assert second.args.count("--state-dir") == 2  # the last one wins, as with any flag
    second_run = subprocess.run(second.args, capture_output=True, text=True, timeout=60)
    assert second_run.returncode == 2, second_run.stderr
    assert f"in use by another process (pid {first.process.pid})" in second_run.stderr
    assert first.process.poll() is None


# ---- a full disk -------------------------------------------------------------------------------------

@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs to fill up needs root")
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Take every free byte of ``directory``'s file system; the returned file frees it."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as file:
        chunk = b"\0" * 65536
        with contextlib.suppress(OSError):
            while True:
                file.write(chunk)
        with contextlib.suppress(OSError):
            while True:
                file.write(b"\0")
    return filler


def produce_new_pids(proxy: ProxyProcess, topic: str, first_pid: int, count: int, client_id: str) -> None:
    """``count`` idempotent batches, one new PID each, pipelined on one connection; every one answered."""
    with connect_to_leader(proxy, topic) as sock:
        frames = [produce_request(topic, record_batch([b"v"], producer_id=first_pid + n, producer_epoch=0,
                                                      base_sequence=0), correlation_id=n + 1, client_id=client_id)
                  for n in range(count)]
        sock.sendall(b"".join(frames))
        for _ in frames:
            assert read_frame(sock), "the proxy closed the connection"


def sealed_pids(ledger: Path) -> set[int]:
    """The PIDs of the ledger's sealed snapshots."""
    return {record.pid for path in ledger.glob("snapshot-*.pids") for record in read_ledger_file(path)}


def alter_quota(proxy: ProxyProcess, user: str, value: float) -> tuple[int, str | None]:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        response = call(sock, ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[
            {"entity": [{"entity_type": "user", "entity_name": user}],
             "ops": [{"key": "producer_byte_rate", "value": value, "remove": False}]}])
    entry = response.entries[0]  # type: ignore[attr-defined]
    return entry.error_code, entry.error_message


def test_a_full_disk_loses_nothing_stops_no_traffic_and_writing_resumes_with_space(  # type: ignore[no-untyped-def]
        broker: Cluster, tmp_path: Path, topic: str) -> None:
    """Before: a short write left a fragment in the ledger (later records read as corrupt, connections
    closed, recovery dropped them), one failed seal stopped sealing for good, and a quota change whose
    save failed was applied by the next one."""
    with small_tmpfs(tmp_path / "state", "4m") as state_dir:
        quota_file = tmp_path / "quotas.toml"
        quota_file.write_text('[[quota]]\nuser = "ANONYMOUS"\nproducer_ids_rate = 1000\n')
        config = tmp_path / "proxy.toml"
        config.write_text('[admin]\nprincipals = ["User:ANONYMOUS"]\n[ledger]\nseal_interval_seconds = 1\n')
        proxy = ProxyProcess(broker.bootstrap, tmp_path / "proxy.log", "--quota-file", str(quota_file),
                             "--config", str(config), node_ids=broker.node_ids)
        proxy.args[proxy.args.index("--state-dir") + 1] = str(state_dir)
        proxy.start()
        ledger = state_dir / "pid-ledger"
        try:
            create_topic_on_one_broker(broker, topic)
            long_client_id = "c" * 30_000  # a record used to carry the whole client id
            produce_new_pids(proxy, topic, FOREIGN_PRODUCER_ID, 50, long_client_id)
            first_pids = {FOREIGN_PRODUCER_ID + n for n in range(50)}
            wait_until(lambda: sealed_pids(ledger) == first_pids, 30, "the first PIDs written and sealed")
            filler = fill(state_dir)
            produce_new_pids(proxy, topic, FOREIGN_PRODUCER_ID + 50, 300, long_client_id)
            assert alter_quota(proxy, "alice", 1000.0)[0] == INVALID_REQUEST  # "not applied: ..."
            wait_until(lambda: write_errors(proxy)["pid-ledger"] and write_errors(proxy)["usage-log"], 30,
                       "failed writes of the pid-ledger and the usage log")
            assert write_errors(proxy)["client-quotas"] >= 1
            filler.unlink()  # space is back
            assert alter_quota(proxy, "bob", 2000.0) == (0, None)
            produce_new_pids(proxy, topic, FOREIGN_PRODUCER_ID + 350, 50, "short")
            settled = write_errors(proxy)
            # the retries (their back-off doubled at each failure, up to RETRY_MAX_S) write what waited, and the
            # next seal takes it: every PID in a snapshot while the proxy runs, not only written at its shutdown
            wait_until(lambda: sealed_pids(ledger) == {FOREIGN_PRODUCER_ID + n for n in range(400)}, RETRY_MAX_S + 30,
                       "every PID written and sealed once the disk has room")
            assert write_errors(proxy) == settled, "writing failed again with room on the disk"
        finally:
            assert proxy.stop() == 0, proxy.log()
        log = proxy.log()
        assert log.count("cannot write the pid-ledger") <= 2, "a full disk is logged once a minute"
        assert "writing the pid-ledger again" in log
        recorded: dict[int, str] = {}
        for path in sorted(ledger.iterdir()):
            if path.suffix in (".pids", ".log"):
                recorded.update((record.pid, record.client_id) for record in read_ledger_file(path))
        assert set(recorded) == {FOREIGN_PRODUCER_ID + n for n in range(400)}  # nothing lost, nothing torn
        assert {len(client_id) for client_id in recorded.values()} == {64, 5}
        overrides = (state_dir / "client-quotas.json").read_text()
        assert '"bob"' in overrides and '"alice"' not in overrides  # the failed change was never saved
        usage = "".join(path.read_text() for path in (state_dir / "usage").iterdir())
        assert all(line.endswith("}") for line in usage.splitlines())  # no partial line


# ---- backpressure for the proxy's own answers ---------------------------------------------------------

def test_a_client_reading_nothing_does_not_make_the_proxy_hold_its_own_answers(  # type: ignore[no-untyped-def]
        own_proxy, tmp_path: Path) -> None:
    """Before: 42 KiB of pipelined DescribeClientQuotas, none read, made the proxy hold 23 MB of answers."""
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text("".join(f'[[quota]]\nuser = "user-{n:04d}"\nproducer_byte_rate = {1000 + n}\n'
                                  for n in range(1000)))
    proxy = own_proxy("--quota-file", str(quota_file), "--write-buffer-high-bytes", str(256 * 1024),
                      *admin_config(tmp_path))
    request = encode_request(DESCRIBE_CLIENT_QUOTAS, 1, strict=False,
                             components=[{"entity_type": "user", "match_type": 2, "match": None}])
    count = 42 * 1024 // len(request) + 1
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", proxy.port))
        call(sock, DESCRIBE_CLIENT_QUOTAS, 1, strict=False,
             components=[{"entity_type": "user", "match_type": 2, "match": None}])  # warm up, one answer's size
        before = rss_bytes(proxy.process.pid)
        sock.sendall(request * count)
        wait_until_idle(proxy.process.pid)
        grown = rss_bytes(proxy.process.pid) - before
        answer_bytes = len(read_frame(sock)) + 4
        assert count * answer_bytes > 20 * 1024 * 1024  # what an unbounded proxy would hold
        assert grown < 8 * 1024 * 1024, f"the proxy grew by {grown / 1e6:.1f} MB"
        sock.settimeout(30)
        for _ in range(count - 1):  # then every answer arrives, in order
            assert len(read_frame(sock)) + 4 == answer_bytes


# ---- a cluster that stops answering -------------------------------------------------------------------

def test_a_request_the_cluster_never_answers_closes_its_connection_after_the_timeout(tmp_path: Path) -> None:
    with KafkaCluster(log_directory=tmp_path) as stalled:
        cluster = Cluster(stalled.bootstrap).wait_until_ready()
        proxy = ProxyProcess(stalled.bootstrap, tmp_path / "proxy.log", "--request-timeout-seconds", "2",
                             node_ids=cluster.node_ids).start()
        try:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
                call(sock, METADATA, 4, topics=[], allow_auto_topic_creation=False)
                stalled.brokers[0].pause()  # alive, connected, silent
                try:
                    sent_at = time.monotonic()
                    sock.sendall(encode_request(METADATA, 4, correlation_id=2, topics=[],
                                                allow_auto_topic_creation=False))
                    assert read_frame(sock) == b""
                    waited = time.monotonic() - sent_at
                finally:
                    stalled.brokers[0].resume()
            assert waited > 1.9, waited  # not before the timeout (a loaded machine is only later)
            # closed by the timeout the proxy was given, for the request the cluster left unanswered
            assert f"the cluster sent nothing for a request in time: request 2 (api {METADATA})" in proxy.log()
            assert "(request-timeout-seconds 2)" in proxy.log()
        finally:
            assert proxy.stop() == 0


# ---- a broker restarting under load -------------------------------------------------------------------

def test_an_idempotent_producer_loses_and_duplicates_nothing_across_a_broker_kill_9(  # type: ignore[no-untyped-def]
        tmp_path: Path, topic: str) -> None:
    """librdkafka, idempotent, acks=all, through the proxy, while the broker is killed -9 and started
    again on its ports and its data; the clients reconnect through the same proxy. Every record
    acknowledged, before, during and after the restart, by the producer that kept running and by one
    started after it, is consumed exactly once, and nothing unacknowledged is consumed."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    with KafkaCluster(log_directory=tmp_path) as restarting:
        cluster = Cluster(restarting.bootstrap).wait_until_ready()
        proxy = ProxyProcess(restarting.bootstrap, tmp_path / "proxy.log", node_ids=cluster.node_ids).start()
        try:
            admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            acknowledged: list[bytes] = []
            failed: list[bytes] = []

            def producer() -> Producer:
                return Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True, "acks": "all",
                                 "linger.ms": 5, "message.timeout.ms": 60_000})

            def send(into: Producer, prefix: str, count: int) -> None:
                for n in range(count):
                    value = f"{prefix}-{n}".encode()
                    into.produce(topic, value, partition=0, on_delivery=lambda error, message, v=value: (
                        acknowledged if error is None else failed).append(v))
                    into.poll(0)

            running = producer()
            send(running, "before", 200)
            assert running.flush(30) == 0 and len(acknowledged) == 200
            send(running, "during", 200)  # in flight while the broker goes
            restarting.brokers[0].kill()
            send(running, "while-down", 100)
            restarting.restart(restarting.brokers[0])
            send(running, "after-old", 100)
            started_after = producer()
            send(started_after, "after-new", 500)
            assert started_after.flush(90) == 0 and running.flush(90) == 0
            assert failed == [] and len(acknowledged) == 1100
            # the whole log, up to its end offset: a duplicate anywhere in it is read
            consumed = [record.value for record in read_to_end(proxy.bootstrap, topic)]
            assert sorted(consumed) == sorted(acknowledged)  # each acknowledged record once, nothing else
        finally:
            assert proxy.stop() == 0
