"""The Produce handler's charges of a request forwarded while it arrives (``ProduceStream``)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from allocator.durable import WriteErrors
from protocol.header import read_request_header
from proxy.cluster.topic_names import TopicNames
from proxy.decision.outcome import Caller
from proxy.handlers.produce import ProduceHandler
from proxy.reporting.usage_log import UsageLog
from proxy.security.access import Access
from proxy.security.acls import AclAuthorizer, AclBinding, AclOperation, AclPermission, PatternType, ResourceType
from proxy.state.pid_ledger import STORE, LedgerRecorder, open_ledger
from proxy.state.quota_service import QuotaService, now_ms
from tests.support import encode_request
from tests.unit.protocol.test_produce_scanner import one_batch


async def _unnamed(_: object) -> dict[object, object]:
    return {}


def streamed_throttle(tmp_path: Path, records: bytes) -> int:
    """The throttle of a Produce of ``records`` to "orders" (a byte a second: any batch is over it), scanned as it
    went to the cluster, once complete."""
    tmp_path.mkdir()
    quota_file = tmp_path / "quotas.toml"
    quota_file.write_text('[[quota]]\ntopic = "orders"\nproducer_byte_rate = 1\n')
    handler = ProduceHandler(QuotaService(quota_file, CollectorRegistry()), UsageLog(tmp_path / "usage"),
                             LedgerRecorder(open_ledger(tmp_path / "ledger", 1000), WriteErrors((STORE,)), 100),
                             TopicNames(_unnamed))
    started_ms = now_ms()  # the request completes at once
    frame = memoryview(encode_request(0, 7, transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[
        {"name": "orders", "partition_data": [{"index": 0, "records": records}]}]))[4:]
    started = handler.on_request_start(read_request_header(frame), frame[:60], len(frame),
                                       Caller("alice", started_ms, clock=lambda: started_ms))
    assert started is not None
    _, stream = started
    assert stream is not None
    stream.feed(frame)
    throttle = stream.completed()
    assert isinstance(throttle, int)
    return throttle


def test_a_batch_followed_by_bytes_that_make_no_batch_is_charged_as_kafka_appends_it(tmp_path: Path) -> None:
    """Kafka trims the bytes after the batch and appends it (``ByteBufferLogInputStream``): the bytes went to the
    cluster unread, so the topic's quota is charged for the batch, as for one alone."""
    alone = streamed_throttle(tmp_path / "alone", one_batch())
    assert alone > 0
    assert streamed_throttle(tmp_path / "trailed", one_batch() + b"\x00") >= alone  # the records' bytes, that one too


def test_with_the_authorizer_a_producers_request_streams_while_the_acls_of_now_allow_it(tmp_path: Path) -> None:
    """A request for one topic its principal may write streams (is forwarded as it arrives); one found allowed is
    allowed again, by the same ACLs only, for the same principal only."""
    authorizer = AclAuthorizer([AclBinding(kind, name, PatternType.LITERAL, "User:alice", "*", AclOperation.WRITE,
                                           AclPermission.ALLOW)
                                for kind, name in ((ResourceType.TOPIC, "orders"),
                                                   (ResourceType.TRANSACTIONAL_ID, "mine"))])
    handler = ProduceHandler(QuotaService(None, CollectorRegistry()), UsageLog(tmp_path / "usage"),
                             LedgerRecorder(open_ledger(tmp_path / "ledger", 1000), WriteErrors((STORE,)), 100),
                             TopicNames(_unnamed), access=Access(authorizer=authorizer))

    def streams(user: str, transactional_id: str | None = None) -> bool:
        frame = memoryview(encode_request(0, 7, transactional_id=transactional_id, acks=1, timeout_ms=30_000,
                                          topic_data=[{"name": "orders", "partition_data": [
                                              {"index": 0, "records": one_batch()}]}]))[4:]
        return handler.on_request_start(read_request_header(frame), frame[:60], len(frame), Caller(user, 0)) is not None

    assert streams("alice") and streams("alice") and streams("alice", "mine")
    assert not streams("alice", "theirs"), "the same topic, a transactional id it may not write: judged whole"
    assert not streams("bob"), "alice's, not bob's"
    authorizer.replace([])
    assert not streams("alice"), "no longer allowed"
