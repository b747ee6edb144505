"""Soak: mixed traffic through one proxy with quotas binding, network faults, a broker kill -9 and a proxy SIGKILL.

``make soak`` (not part of ``make test``; 20 minutes by default). One Apache Kafka node; through one
proxy terminating SASL (SCRAM-SHA-256 and PLAIN logins), with byte-rate, mutation and producer-ID
quotas that bind: 10 idempotent librdkafka producers (acks=all), 4 librdkafka consumers (one
partition each, assigned), a topic created and deleted every 10 s, and a new producer (a new PID, a
new login) every 0.6 s (100 a minute). At 40% of the run the broker is killed with SIGKILL and
started again on its ports and data while the producers run; at 70% the proxy is killed with SIGKILL
and started again on its ports and state. Every connection, the clients' to the proxy and the proxy's to the
broker, passes through Toxiproxy, and every ``FAULT_EVERY_S`` one of its faults (``proxy.dev.toxiproxy.FAULTS``:
latency with jitter, a bandwidth limit, slicer, reset_peer, a black hole, limit_data, a 10 s partition) is laid on
one side for its time, in turn, both sides each; the results list them.

Checks at the end: every acknowledged record consumed exactly once, and none that no producer wrote (missing ones
are listed by id; a record whose delivery failed, or went unreported by a producer that met a fatal error, may or
may not have been written, as Kafka tells the client: counted, not judged); the proxy's RSS flat after warm-up
(within 10% between minute 5 and the kill, and between the restart's warm-up and the end); no file-descriptor
growth; the state directory within its bound. Figures go to ``bench/soak-results.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from queue import SimpleQueue
from typing import Any

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.report import write_results
from proxy.dev.apache_kafka import KafkaCluster
from proxy.dev.toxiproxy import BROKER_SIDE, CLIENT_SIDE, FAULTS, Toxiproxy, route_brokers, route_listeners
from tests.support import ProxyProcess, proxy_command

PARTITIONS = 4
FAULT_EVERY_S = 40
USERS = {"producer": ("SCRAM-SHA-256", "producer-secret"), "consumer": ("PLAIN", "consumer-secret"),
         "ops": ("SCRAM-SHA-256", "ops-secret")}
QUOTAS = """
[[quota]]
user = "producer"
producer_byte_rate = 400000
producer_ids_rate = 1.5
[[quota]]
user = "consumer"
consumer_byte_rate = 2000000
[[quota]]
user = "ops"
controller_mutation_rate = 1
"""


def client_settings(bootstrap: str, user: str) -> dict[str, Any]:
    mechanism, password = USERS[user]
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            "allow.auto.create.topics": False}


class Ledger:
    """Every record's id: written, acknowledged or failed, and how often it was consumed.

    The clients only put what they saw on queues, without a lock: librdkafka may call a delivery callback while the
    fatal error of an idempotent producer is pending, and the ``with`` statement of a lock taken then raised
    SystemError with the lock held, which deadlocked the soak. The main thread settles the queues."""

    def __init__(self) -> None:
        self._written: SimpleQueue[bytes] = SimpleQueue()
        self._reports: SimpleQueue[tuple[bool, bytes]] = SimpleQueue()
        self._reads: SimpleQueue[bytes] = SimpleQueue()
        self.written: set[bytes] = set()
        self.acknowledged: set[bytes] = set()
        self.failed: set[bytes] = set()
        self.consumed: Counter[bytes] = Counter()

    def wrote(self, value: bytes) -> None:
        self._written.put(value)

    def reporter(self, value: bytes) -> Callable[[KafkaError | None, Any], None]:
        """The delivery callback of the record ``value``."""
        return lambda error, message: self._reports.put((error is None, value))

    def read(self, value: bytes) -> None:
        self._reads.put(value)

    def settle(self) -> None:
        while not self._written.empty():
            self.written.add(self._written.get())
        while not self._reports.empty():
            acknowledged, value = self._reports.get()
            (self.acknowledged if acknowledged else self.failed).add(value)
        while not self._reads.empty():
            self.consumed[self._reads.get()] += 1


class Soak:
    def __init__(self, duration_s: float, workdir: Path) -> None:
        self.duration_s = duration_s
        self.workdir = workdir
        self.stop = threading.Event()
        self.draining = threading.Event()
        """Set after the run while the consumers catch up."""
        self.ledger = Ledger()
        self.topic = f"soak-{uuid.uuid4().hex[:8]}"
        self.errors: list[str] = []
        self.new_pid_producers = 0
        self.topics_created = 0
        self.bootstrap = ""
        """The proxy's, through Toxiproxy."""
        self.faults: list[dict[str, Any]] = []
        """The faults laid, when and where."""

    # ---- clients ------------------------------------------------------------------------------------

    def producer(self, index: int) -> None:
        settings = {**client_settings(self.bootstrap, "producer"), "enable.idempotence": True, "acks": "all",
                    "linger.ms": 20, "message.timeout.ms": 120_000, "client.id": f"soak-p{index}"}
        producer = Producer(settings)
        sequence = 0
        while not self.stop.is_set():
            value = f"p{index}-{sequence}".encode()
            try:
                producer.produce(self.topic, value, partition=sequence % PARTITIONS,
                                 on_delivery=self.ledger.reporter(value))
                self.ledger.wrote(value)
                sequence += 1
                producer.poll(0)
            except BufferError:
                producer.poll(0.1)
            except (KafkaException, SystemError) as error:
                # a fatal idempotence error (raised by produce, or by poll through a delivery callback): a new
                # producer carries on; the records the old one had not acknowledged may or may not be written
                self.errors.append(f"producer {index}: {error}")
                with contextlib.suppress(KafkaException, SystemError):
                    producer.flush(30)
                producer = Producer(settings)
            time.sleep(0.002)
        producer.flush(150)

    def consumer(self, index: int) -> None:
        consumer = Consumer({**client_settings(self.bootstrap, "consumer"), "group.id": f"soak-{index}",
                             "enable.auto.commit": False, "client.id": f"soak-c{index}"})
        consumer.assign([TopicPartition(self.topic, index % PARTITIONS, OFFSET_BEGINNING)])
        while not self.stop.is_set() or self.draining.is_set():
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            self.ledger.read(message.value() or b"")  # one consumer per partition: read twice is a duplicate
        consumer.close()

    def new_pids(self) -> None:
        """A new idempotent producer (a new login, a new PID) every 0.6 s: 100 a minute."""
        while not self.stop.is_set():
            time.sleep(0.6)
            producer = Producer({**client_settings(self.bootstrap, "producer"), "enable.idempotence": True,
                                 "message.timeout.ms": 120_000, "client.id": "soak-new-pid"})
            value = f"n{self.new_pid_producers}".encode()
            producer.produce(self.topic, value, partition=0,
                             on_delivery=self.ledger.reporter(value))
            self.ledger.wrote(value)
            producer.flush(30)
            self.new_pid_producers += 1

    def topic_churn(self) -> None:
        admin = AdminClient(client_settings(self.bootstrap, "ops"))
        while not self.stop.is_set():
            time.sleep(10)
            name = f"churn-{uuid.uuid4().hex[:8]}"
            try:
                admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)
                admin.delete_topics([name])[name].result(30)
                self.topics_created += 1
            except Exception as error:  # throttled by the mutation quota, or the broker restarting
                self.errors.append(f"topic churn: {error}")

    def lay_faults(self, toxiproxy: Toxiproxy, started: float) -> None:
        """One fault every ``FAULT_EVERY_S``, in turn, on the clients' side and then on the broker's."""
        for number in itertools.count():
            if self.stop.wait(FAULT_EVERY_S):
                return
            fault = FAULTS[number % len(FAULTS)]
            side = ("client-", "broker-")[number // len(FAULTS) % 2]
            at = time.monotonic()
            routes = toxiproxy.lay(fault, side)
            self.stop.wait(fault.seconds)
            toxiproxy.heal()
            self.faults.append({"minute": round((at - started) / 60, 2), "fault": fault.name, "seconds": fault.seconds,
                                "between": "the clients and the proxy" if side == "client-" else
                                "the proxy and the broker", "routes": routes})

    # ---- the run ------------------------------------------------------------------------------------

    def create_topic(self) -> None:
        admin = AdminClient(client_settings(self.bootstrap, "ops"))
        admin.create_topics([NewTopic(self.topic, PARTITIONS, 1)])[self.topic].result(60)

    def run(self) -> dict[str, Any]:
        users_file = self.workdir / "users.toml"
        for user, (mechanism, password) in USERS.items():
            subprocess.run([*proxy_command(), "users", "add", user, "--mechanism", mechanism, "--users-file",
                            str(users_file)], input=password + "\n", text=True, check=True, capture_output=True)
        quota_file = self.workdir / "quotas.toml"
        quota_file.write_text(QUOTAS)
        config = self.workdir / "proxy.toml"
        config.write_text('[admin]\nprincipals = ["User:ops"]\n[ledger]\nseal_interval_seconds = 60\n')
        samples: list[dict[str, float]] = []
        with Toxiproxy() as toxiproxy:
            broker = KafkaCluster(log_directory=self.workdir, advertised_host=BROKER_SIDE)
            upstream = route_brokers(toxiproxy, broker)
            with broker:
                proxy = ProxyProcess(upstream, self.workdir / "proxy.log", "--sasl-users", str(users_file),
                                     "--quota-file", str(quota_file), "--config", str(config), "--log-level", "WARNING",
                                     "--advertised-host", CLIENT_SIDE, node_ids=broker.broker_ids)
                proxy.start()
                self.bootstrap = route_listeners(toxiproxy, proxy.port, proxy.broker_port_base, broker.broker_ids)
                self.create_topic()
                started = time.monotonic()
                threads = [threading.Thread(target=self.producer, args=(i,), daemon=True) for i in range(10)]
                threads += [threading.Thread(target=self.consumer, args=(i,), daemon=True) for i in range(4)]
                threads += [threading.Thread(target=self.new_pids, daemon=True),
                            threading.Thread(target=self.topic_churn, daemon=True),
                            threading.Thread(target=self.lay_faults, args=(toxiproxy, started), daemon=True)]
                for thread in threads:
                    thread.start()
                broker_restarted = proxy_killed = False
                while (elapsed := time.monotonic() - started) < self.duration_s:
                    time.sleep(min(60 - elapsed % 60, self.duration_s - elapsed))
                    elapsed = time.monotonic() - started
                    samples.append(self.sample(proxy, elapsed))
                    print(f"soak {elapsed / 60:.1f} min: {samples[-1]}", file=sys.stderr, flush=True)
                    if not broker_restarted and elapsed >= 0.4 * self.duration_s:
                        broker_restarted = True
                        broker.brokers[0].kill()
                        samples.append({"minute": elapsed / 60, "event": "broker killed"})  # type: ignore[dict-item]
                        broker.restart(broker.brokers[0])
                    elif not proxy_killed and elapsed >= 0.7 * self.duration_s:
                        proxy_killed = True
                        proxy.stop(signal.SIGKILL)
                        samples.append({"minute": elapsed / 60, "event": "proxy killed"})  # type: ignore[dict-item]
                        proxy.start()
                self.stop.set()
                self.draining.set()
                for thread in threads[:10] + threads[14:]:
                    thread.join(180)
                self.wait_for_consumers()
                self.draining.clear()
                for thread in threads[10:14]:
                    thread.join(30)
                final = self.sample(proxy, time.monotonic() - started)
                assert proxy.stop() == 0, "the proxy did not stop cleanly"
        return self.figures(samples, final)

    def wait_for_consumers(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.ledger.settle()
            if not self.ledger.acknowledged - set(self.ledger.consumed):
                return
            time.sleep(1)

    @staticmethod
    def sample(proxy: ProxyProcess, elapsed_s: float) -> dict[str, float]:
        assert proxy.process is not None
        process = psutil.Process(proxy.process.pid)
        state = sum(path.stat().st_size for path in proxy.state_dir.rglob("*") if path.is_file())
        return {"minute": round(elapsed_s / 60, 2), "rss_mb": round(process.memory_info().rss / 1e6, 1),
                "fds": process.num_fds(), "state_dir_mb": round(state / 1e6, 2)}

    def figures(self, samples: list[dict[str, float]], final: dict[str, float]) -> dict[str, Any]:
        ledger = self.ledger
        ledger.settle()
        consumed = ledger.consumed
        lost = ledger.acknowledged - set(consumed)
        duplicated = [value for value, count in consumed.items() if count > 1]
        never_written = set(consumed) - ledger.written
        in_doubt = ledger.written - ledger.acknowledged
        """Failed, or not reported by a producer that met a fatal error: written or not, as Kafka tells the client."""
        runs = [sample for sample in samples if "rss_mb" in sample]
        kill_at = next((s["minute"] for s in samples if s.get("event") == "proxy killed"), None)
        before_kill = [s for s in runs if kill_at is None or s["minute"] < kill_at]
        after_kill = [s for s in runs if kill_at is not None and s["minute"] > kill_at + 2]
        warm = [s for s in before_kill if s["minute"] >= 5] or before_kill
        results: dict[str, Any] = {
            "duration_min": round(self.duration_s / 60, 1),
            "acknowledged": len(ledger.acknowledged),
            "lost": len(lost), "duplicated": len(duplicated), "consumed_never_written": len(never_written),
            "lost_ids": sorted(value.decode() for value in lost)[:100],
            "duplicated_ids": sorted(value.decode() for value in duplicated)[:100],
            "consumed_never_written_ids": sorted(value.decode() for value in never_written)[:100],
            "in_doubt": len(in_doubt),
            "in_doubt_consumed": len(in_doubt & set(consumed)),
            "failed_deliveries": len(ledger.failed),
            "new_pid_producers": self.new_pid_producers, "topics_created_and_deleted": self.topics_created,
            "rss_growth_after_warm_up": round(warm[-1]["rss_mb"] / warm[0]["rss_mb"] - 1, 3) if warm else None,
            "rss_growth_after_proxy_restart": (round(after_kill[-1]["rss_mb"] / after_kill[0]["rss_mb"] - 1, 3)
                                               if len(after_kill) > 1 else None),
            "fds_first_last": [runs[0]["fds"], final["fds"]],
            "state_dir_mb_final": final["state_dir_mb"],
            "samples": samples + [final],
            "client_errors": self.errors[:20],
            "faults": self.faults,
        }
        results["passed"] = bool(
            not lost and not duplicated and not never_written and len(ledger.acknowledged) > 0
            and (results["rss_growth_after_warm_up"] or 0) <= 0.10
            and (results["rss_growth_after_proxy_restart"] or 0) <= 0.10
            and final["fds"] <= runs[0]["fds"] + 20 and final["state_dir_mb"] < 100)
        return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--out", default="bench/soak-results.json")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kqp-soak-"))
    results = Soak(args.minutes * 60, workdir).run()
    results["workdir"] = str(workdir)
    write_results(args.out, results)
    os.sync()
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
