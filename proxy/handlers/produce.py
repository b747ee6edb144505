"""Produce requests under the byte-rate, topic and producer-ID quotas.

The byte rate is charged and throttled as in Kafka's ``KafkaApis.handleProduceRequest``
(``ClientQuotaManager.maybeRecordAndGetThrottleTimeMs``, then ``ClientQuotaManager.throttle``, KIP-219);
topic quotas are the proxy's own; producer IDs follow KIP-936.

The handler decides; the connection acts: forward or answer locally, then throttle and mute.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from protocol.apis import Api
from protocol.codecs import decode_response
from protocol.errors import (
    THROTTLING_QUOTA_EXCEEDED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ProtocolError,
)
from protocol.header import RequestHeader
from protocol.produce import (
    FIRST_TOPIC_ID_PRODUCE_VERSION,
    NO_PRODUCER_ID,
    ProduceScan,
    ProduceTopicsHead,
    StreamedProduceScan,
    produce_acks,
    produce_topics_head,
    scan_produce,
    trailed_batches_appended,
)
from protocol.responses import (
    merged_produce_response,
    produce_error_response,
    produce_request_without_invalid_partitions,
)
from proxy.cluster.topic_names import TopicNames
from proxy.decision.outcome import (
    CLOSE,
    Caller,
    Decided,
    Forward,
    OnResponse,
    Outcome,
    local_answer,
    replacement_request,
)
from proxy.handlers.refused_topics import refused_by_name_or_id
from proxy.reporting.usage_log import UsageLog
from proxy.security.access import Access
from proxy.security.acls import AclOperation, ResourceType
from proxy.state.pid_ledger import LedgerRecorder
from proxy.state.quota_service import QuotaService
from quotas.config import PidQuotaMode, QuotaType
from quotas.decisions import NO_PID_CHARGED, UNLIMITED, Decision, PidDecision, Requester
from quotas.producer_id_quota import ProducerBatch

_T = TypeVar("_T")

"""Kafka closes an acks=0 connection whose Produce has a partition error: the producer, which gets
no answer, notices the disconnection and refreshes its metadata instead of losing records silently."""


class ProduceHandler:
    def __init__(self, quotas: QuotaService, usage: UsageLog, ledger: LedgerRecorder, topic_names: TopicNames,
                 scan_all: bool = False, access: Access | None = None) -> None:
        """``scan_all``: read every request's batches so the ledger sees every producer ID. ``access``: the topics
        a client may not write (each request's topics are read to find them): the proxy's own, and with the
        authorizer those its ACLs do not allow, and the transactional ids."""
        self._quotas = quotas
        self._usage = usage
        self._ledger = ledger
        self._topic_names = topic_names
        self._scan_all = scan_all
        self._access = access or Access()

    def _checks_producer_ids(self, user: str) -> bool:
        """A producer-ID quota applies (or every PID is recorded)."""
        return self._scan_all or self._quotas.producer_ids.applies(user)

    def _scans_batches(self, user: str) -> bool:
        """Producer IDs are checked, or a topic quota exists: the batch headers must be read."""
        return self._checks_producer_ids(user) or self._quotas.config.configures_topics(QuotaType.PRODUCER_BYTE_RATE)

    def _charge_topics(self, scan: ProduceScan, requester: Requester, now_ms: int) -> Decision:
        """The topic quotas' decision on the request's bytes of each topic, logged per topic; none without a
        topic quota."""
        if not self._quotas.config.configures_topics(QuotaType.PRODUCER_BYTE_RATE):
            return UNLIMITED
        sizes = self._topic_bytes(scan)
        self._usage.topic_bytes(requester.user, sizes, fetched=False)
        return self._quotas.produce_topics.record(requester, sizes, now_ms)

    def _topic_bytes(self, scan: ProduceScan) -> dict[str, int]:
        """The record bytes of each topic of the request that the cluster appends (its valid partitions)."""
        sizes: dict[str, int] = {}
        for topic in scan.topics:
            name = topic.name if topic.topic_id is None else self._topic_names.name(topic.topic_id)
            if name is None:
                continue  # an id the cluster does not have (looked up already): it refuses the topic
            sizes[name] = sizes.get(name, 0) + sum(partition.batch.end - partition.batch.start
                                                   for partition in topic.partitions
                                                   if partition.batch is not None and not partition.error_code)
        return sizes

    def _unnamed_topics(self, scan: ProduceScan, header: RequestHeader) -> set[bytes]:
        """Topic ids (v13) a topic quota or the reserved topics need named and the proxy cannot name yet."""
        if header.api_version < FIRST_TOPIC_ID_PRODUCE_VERSION or not (
                self._access.guards_topics or self._quotas.config.configures_topics(QuotaType.PRODUCER_BYTE_RATE)):
            return set()
        return self._topic_names.unknown(topic.topic_id for topic in scan.topics if topic.topic_id is not None)

    def _check_producer_ids(self, batches: list[ProducerBatch], requester: Requester, now_ms: int) -> PidDecision:
        """The producer-ID quota's decision; the ledger records PIDs the cluster is going to see.
        Every PID of ``batches`` is in the ledger's cache (``needs_lookup`` was asked)."""
        if not batches:  # no idempotent batch: nothing to charge, nothing to record (most producers' requests)
            return NO_PID_CHARGED
        ledger = self._ledger
        window_ms = self._quotas.config.settings.producer_id_window.size_ms  # one KIP-936 window
        decision = self._quotas.producer_ids.record(requester, batches, now_ms, ledger.seen_within(window_ms))
        if decision.admitted and batches:
            ledger.seen({batch.producer_id for batch in batches}, requester.user, requester.client_id)
        return decision

    def _needs_whole_frame(self, caller: Caller, header: RequestHeader, frame_start: memoryview) -> bool:
        """Reject mode decides before anything is forwarded; throttle mode may stream the request
        and check its producer IDs once it is complete (``ProduceStream``), as topic quotas charge it.

        With topics that may be refused, only a request for one topic the proxy knows the client may write may
        stream: the next topic's name comes after the first one's records, too late to keep the request from the
        cluster."""
        if self._checks_producer_ids(caller.user) and \
                self._quotas.config.settings.producer_id_mode is PidQuotaMode.REJECT:
            return True
        return self._access.guards_topics and not self._writes_one_topic_allowed(frame_start, header, caller)

    def _writes_one_topic_allowed(self, frame_start: memoryview, header: RequestHeader, caller: Caller) -> bool:
        """The request names one topic, which the proxy knows the caller may write, and a transactional id it may
        write, if any (read from its start)."""
        try:
            head = produce_topics_head(frame_start, header)
        except ProtocolError:
            return False  # the whole request is judged, and refused
        return head is not None and head.topic_count == 1 and self._access.judged_once(
            caller, Api.PRODUCE, head, self._may_write_head)

    def _may_write_head(self, caller: Caller, head: ProduceTopicsHead) -> bool:
        """The caller may write the transactional id, if any, and the first topic: one named, or of an id the proxy
        has named (an id names one topic for ever)."""
        if not self._may_write_transactional_id(head.transactional_id, caller):
            return False
        name = head.first_name if head.first_topic_id is None else self._topic_names.name(head.first_topic_id)
        return name is not None and not self._access.topic_refusal(caller, AclOperation.WRITE)(name)

    def _may_write_transactional_id(self, transactional_id: str | None, caller: Caller) -> bool:
        """No transactional id (the cluster refuses transactional records without one itself), or one the caller
        may write."""
        return transactional_id is None or self._access.allows(caller, AclOperation.WRITE,
                                                               ResourceType.TRANSACTIONAL_ID, transactional_id)

    def on_request(self, header: RequestHeader, frame: memoryview, caller: Caller) -> Decided:
        """A whole request (size prefix excluded)."""
        return self._handle(header, frame, len(frame), caller, whole=True)

    def on_request_start(self, header: RequestHeader, frame_start: memoryview, request_bytes: int, caller: Caller
                         ) -> tuple[Decided, ProduceStream | None] | None:
        """A request forwarded as it arrives, decided on its start; its batches read as they go by when a quota
        needs them (``ProduceStream``). None: it is judged once whole."""
        if self._needs_whole_frame(caller, header, frame_start):
            return None
        # a producer-ID quota in throttle mode checks the batches, and a topic quota charges them, once the request
        # is complete: their headers are read as they go by, the records between them need not be (made before
        # anything is charged: a version it cannot read raises, and the request is judged whole)
        stream = (ProduceStream(self, header, request_bytes, caller) if self._scans_batches(caller.user) else None)
        return self._handle(header, frame_start, request_bytes, caller, whole=False), stream

    def _handle(self, header: RequestHeader, frame: memoryview, request_bytes: int, caller: Caller, whole: bool
                ) -> Decided:
        """``frame`` excludes the size prefix; it is only the start of the request when ``whole``
        is False (cut through: producer IDs are checked later). ``request_bytes`` is the whole
        request's size (Kafka's ``sizeInBytes``), charged to the byte-rate quota.

        Everything is parsed before anything is charged, so a request that turns out malformed
        (or whose start is too short to judge yet) costs no quota. A request carrying a PID the
        ledger's cache does not know is decided once the worker thread has read it from disk.
        """
        scans_batches = self._scans_batches(caller.user)
        # the common request, for one topic the client may write, needs no scan for the refused topics' sake
        scanned = whole and (scans_batches or (self._access.guards_topics
                                               and not self._writes_one_topic_allowed(frame, header, caller)))
        scan = scan_produce(frame, header) if scanned else None
        if scan is None:
            return self._decide(frame, header, None, [], request_bytes, caller)
        batches = _producer_batches(scan) if scans_batches else []
        missing = self._ledger.needs_lookup({batch.producer_id for batch in batches}) if batches else []
        unnamed = self._unnamed_topics(scan, header)
        if missing or unnamed:
            return self._after_lookups(missing, unnamed, self._decide, frame, header, scan, batches, request_bytes,
                                       caller)
        return self._decide(frame, header, scan, batches, request_bytes, caller)

    async def _after_lookups(self, missing: list[int], unnamed: set[bytes], decide: Callable[..., _T],
                             *arguments: Any) -> _T:
        """``decide(*arguments)`` (its last argument the caller) once the ledger has read the PIDs its cache does
        not know and the cluster has named the topic ids the proxy does not, at the time they are known."""
        if missing:
            await self._ledger.look_up(missing)
        if unnamed:
            await self._topic_names.look_up(unnamed)
        *rest, caller = arguments
        return decide(*rest, caller.later())

    def _decide(self, frame: memoryview, header: RequestHeader, scan: ProduceScan | None,
                batches: list[ProducerBatch], request_bytes: int, caller: Caller) -> Outcome:
        user, now_ms = caller.user, caller.now_ms
        client_id = header.client_id or ""
        requester = Requester(user, client_id, caller.broker)
        acks = scan.acks if scan is not None else produce_acks(frame, header)
        if scan is not None and self._access.guards_topics:
            if scan.transactional and not self._may_write_transactional_id(scan.transactional_id, caller):
                return self._refused_whole(header, scan, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            scan = self._refused_topics(scan, caller)
        charged = self._quotas.produce.record(requester, request_bytes, now_ms)
        throttle_ms = charged.throttle_ms
        if scan is None:
            self._usage.produce(user, client_id, request_bytes, 0, throttle_ms, False)
            self._usage.observed(user, client_id, charged.observed_ms)
            return Forward(throttle_ms, expects_response=acks != 0)
        decision = self._check_producer_ids(batches, requester, now_ms)
        topics = self._charge_topics(scan, requester, now_ms) if decision.admitted else UNLIMITED
        throttle_ms = max(throttle_ms, decision.throttle_ms, topics.throttle_ms)
        self._usage.produce(user, client_id, request_bytes, len(decision.new_pids), throttle_ms, not decision.admitted)
        self._usage.observed(user, client_id, max(charged.observed_ms, decision.observed_ms, topics.observed_ms),
                             decision.observed_refused)
        if not decision.admitted:
            if acks == 0:
                return CLOSE
            body = produce_error_response(scan, header.api_version, THROTTLING_QUOTA_EXCEEDED, throttle_ms)
            return local_answer(header, body, throttle_ms)
        if scan.has_invalid_partitions:
            return _without_invalid_partitions(frame, header, scan, throttle_ms)
        return Forward(throttle_ms, expects_response=acks != 0)

    @staticmethod
    def _refused_whole(header: RequestHeader, scan: ProduceScan, error_code: int) -> Outcome:
        """Every partition answered ``error_code`` (``KafkaApis.handleProduceRequest``: transactional records
        without a transactional id the principal may write, answered before any quota is charged). Kafka answers
        acks=0 nothing and reads on; the proxy closes the connection (no producer sends transactions with
        acks=0)."""
        if scan.acks == 0:
            return CLOSE
        return local_answer(header, produce_error_response(scan, header.api_version, error_code, 0))

    def _refused_topics(self, scan: ProduceScan, caller: Caller) -> ProduceScan:
        """The scan with every partition of a topic the caller may not write refused as Kafka refuses it (its
        authorization comes before the records are validated)."""
        refused = refused_by_name_or_id(self._access.topic_refusal(caller, AclOperation.WRITE), self._topic_names)
        topics = []
        for topic in scan.topics:
            if refused(topic.name, topic.topic_id):
                topic = topic._replace(partitions=tuple(
                    partition._replace(error_code=TOPIC_AUTHORIZATION_FAILED, error_message=None)
                    for partition in topic.partitions))
            topics.append(topic)
        return scan._replace(topics=tuple(topics))

    def completed_throttle(self, streamed: StreamedProduceScan, caller: Caller) -> int | Awaitable[int]:
        """For a request forwarded while it arrived: check its producer IDs (throttle mode) and charge its topics
        now (or once the ledger has read the PIDs its cache does not know, and the topic ids are named)."""
        header, scan = streamed.header, streamed.scan
        assert scan is not None, "the request is complete"
        scan = trailed_batches_appended(scan)
        batches = _producer_batches(scan)
        missing = self._ledger.needs_lookup({batch.producer_id for batch in batches})
        unnamed = self._unnamed_topics(scan, header)
        if missing or unnamed:
            return self._after_lookups(missing, unnamed, self._completed_throttle, header, scan, batches, caller)
        return self._completed_throttle(header, scan, batches, caller)

    def _completed_throttle(self, header: RequestHeader, scan: ProduceScan, batches: list[ProducerBatch],
                            caller: Caller) -> int:
        client_id = header.client_id or ""
        requester = Requester(caller.user, client_id, caller.broker)
        decision = self._check_producer_ids(batches, requester, caller.now_ms)
        topics = self._charge_topics(scan, requester, caller.now_ms)
        throttle_ms = max(decision.throttle_ms, topics.throttle_ms)
        self._usage.producer_ids(caller.user, client_id, len(decision.new_pids), throttle_ms)
        self._usage.observed(caller.user, client_id, max(decision.observed_ms, topics.observed_ms),
                             decision.observed_refused)
        return throttle_ms


class ProduceStream(StreamedProduceScan):
    """The scan of a request forwarded while it arrives, fed as it goes by; once complete, its producer IDs are
    checked and its topics charged (``ProduceHandler.completed_throttle``)."""

    __slots__ = ("_handler", "_caller")

    def __init__(self, handler: ProduceHandler, header: RequestHeader, frame_bytes: int, caller: Caller) -> None:
        """``caller``: who sent the request, as it was when its start was decided."""
        super().__init__(header, frame_bytes)
        self._handler = handler
        self._caller = caller

    def completed(self) -> int | Awaitable[int]:
        """Charged at the time the request is complete, as Kafka charges a request once it has read it whole."""
        return self._handler.completed_throttle(self, self._caller.later())


def _without_invalid_partitions(frame: memoryview, header: RequestHeader, scan: ProduceScan,
                                throttle_ms: int) -> Outcome:
    """Partitions whose records are invalid get their error (``validateRecords``); the rest go on."""
    version = header.api_version
    valid = any(not p.error_code for topic in scan.topics for p in topic.partitions)
    if scan.acks == 0:
        if not valid:
            return CLOSE
        forwarded = replacement_request(frame, header, produce_request_without_invalid_partitions(frame, header, scan))
        return Forward(replacement=forwarded, expects_response=False, close_after_response=True)
    if not valid:
        return local_answer(header, merged_produce_response(scan, version, None, throttle_ms), throttle_ms)

    def finish(upstream_body: memoryview) -> bytes:
        return merged_produce_response(scan, version, decode_response(Api.PRODUCE, version, upstream_body), 0)

    forwarded = replacement_request(frame, header, produce_request_without_invalid_partitions(frame, header, scan))
    return Forward(throttle_ms, forwarded, on_response=OnResponse(finish=finish))


def _producer_batches(scan: ProduceScan) -> list[ProducerBatch]:
    return [ProducerBatch(p.batch.producer_id, (topic.name, topic.topic_id, p.partition), p.batch.base_sequence)
            for topic in scan.topics for p in topic.partitions
            if p.batch is not None and not p.error_code and p.batch.producer_id != NO_PRODUCER_ID]

