"""The fuzz targets: each takes one input and runs a parser of the proxy's on it as a connection would, raising
nothing but what the connection turns into a close (``ProtocolError``) or a refused login
(``AuthenticationFailed``, answered as Kafka answers one). Anything else is a finding. Where a parser hands on
something of its own (a request it rewrote, an answer it made), that is checked to decode as well.

An input is read by ``Reader``: a few leading bytes choose the api, version and sizes; then parts, each a two-byte
length and its bytes, the last one the rest (``layout`` writes one, for the seeds). Handlers run as the proxy runs
them, with its quota service, usage log and an event loop; the cluster's side is a stub that knows every topic
(``Cluster``), since no request here reaches a cluster.
"""

from __future__ import annotations

import asyncio
import struct
import tempfile
import uuid
from array import array
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import count
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from protocol.addresses import BrokerAddress, carries_addresses, rewrite_broker_addresses
from protocol.api_versions import VersionRange, adapt_api_versions
from protocol.apis import Api, is_flexible_request
from protocol.codecs import decode_request, decode_response, max_version
from protocol.errors import ProtocolError
from protocol.fetch import (
    capped_fetch_request,
    fetch_asked,
    fetch_response_size,
    fetch_response_start,
    fetch_response_topic_bytes,
    fetch_session_epoch,
)
from protocol.framing import FrameEnds, FrameSplitter
from protocol.header import (
    REQUEST_PREFIX_BYTES,
    encode_response_header,
    parse_request_header,
    peek_request,
    read_request_header,
)
from protocol.produce import MIN_SCANNED_PRODUCE_VERSION, StreamedProduceScan, produce_acks, scan_produce
from protocol.responses import (
    merged_produce_response,
    produce_error_response,
    produce_request_without_invalid_partitions,
)
from protocol.throttle import carries_throttle, raise_throttle
from proxy.cluster.info import TopicPartitions
from proxy.cluster.topic_names import TopicNames
from proxy.decision.outcome import Caller, ChargedResponse, Close, Decided, Forward, Outcome, Respond
from proxy.handlers.client_quotas import ClientQuotaHandlers
from proxy.handlers.fetch import FetchHandler
from proxy.handlers.producer_ids import InitProducerIdHandler
from proxy.handlers.topic_mutations import TopicMutationHandler
from proxy.reporting.usage_log import UsageLog
from proxy.security.access import Access
from proxy.security.oauthbearer import OAuthBearerSettings, UnsecuredJwtValidator
from proxy.security.sasl import LoginSettings, SaslServer
from proxy.security.sasl_messages import (
    AuthenticationFailed,
    oauthbearer_principal,
    parse_oauthbearer_token,
    parse_plain_token,
    parse_scram_client_first,
    scram_attributes,
)
from proxy.security.users import PLAIN, UserStore, plain_credential, scram_credential
from proxy.state.quota_service import QuotaService
from tests.unit.proxy.outcomes import handled

# ---- reading an input ---------------------------------------------------------------------------------------


class Reader:
    """Leading bytes (``byte``), then parts: a two-byte length and as many bytes (``part``), the last the rest."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def byte(self) -> int:
        at = self._at
        self._at += 1
        return self._data[at] if at < len(self._data) else 0

    def part(self) -> bytes:
        size = self.byte() << 8 | self.byte()
        part = self._data[self._at:self._at + size]
        self._at += size
        return part

    def rest(self) -> bytes:
        return self._data[self._at:]


def layout(*leading: int, parts: Iterable[bytes] = (), rest: bytes = b"") -> bytes:
    """An input ``Reader`` reads as ``leading`` bytes, ``parts`` and ``rest``."""
    return bytes(leading) + b"".join(len(part).to_bytes(2, "big") + part for part in parts) + rest


def request_header(api_key: int, version: int, client_id: str = "fuzz", correlation_id: int = 7) -> bytes:
    """A request header (v1, or v2 with its empty tagged fields for a flexible version)."""
    name = client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, len(name)) + name
    return header + (b"\x00" if is_flexible_request(api_key, version) else b"")


def version_of(api_key: int, chosen: int, lowest: int = 0) -> int:
    return lowest + chosen % (max_version(api_key) - lowest + 1)


def allowed(*errors: type[Exception]) -> Callable[[Callable[[], Any]], Any]:
    """Run the call; the given errors are answers, not findings."""

    def run(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except errors:
            return None

    return run


protocol_errors = allowed(ProtocolError)


# ---- the proxy around the handlers --------------------------------------------------------------------------

_QUOTAS = """[[quota]]
user = "<default>"
producer_byte_rate = 2000
consumer_byte_rate = 2000
controller_mutation_rate = 5
producer_ids_rate = 2

[[quota]]
topic = "<default>"
producer_byte_rate = 2000
consumer_byte_rate = 2000
"""
"""Small budgets: the throttled paths (a Fetch answered empty, a mutation refused) are reached too."""


class Cluster:
    """The proxy's view of the cluster (``ClusterInfo``) as a stub: every topic exists with 3 partitions, its id
    made from its name; what the cluster's answers teach it is forgotten."""

    async def partitions(self, topics: list[str]) -> dict[str, TopicPartitions]:
        return {topic: TopicPartitions(3, uuid.uuid5(uuid.NAMESPACE_OID, topic)) for topic in topics}

    async def default_partitions(self) -> int:
        return 1

    async def topics_by_id(self, topic_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int]]:
        return {topic_id: (f"topic-{topic_id.hex[:8]}", 3) for topic_id in topic_ids}

    def accepted(self, name: str, topic_id: uuid.UUID | None, count: int) -> None:
        pass

    def deleted(self, name: str) -> None:
        pass

    def learn_default_partitions(self, count: int) -> None:
        pass


class _ProducerIds:
    """A producer-ID source and ledger that hand out and record IDs without a disk."""

    def __init__(self) -> None:
        self._next = count(1 << 48)

    def next_id(self) -> int | None:
        return next(self._next)

    def issued(self, pid: int, user: str, client_id: str, epoch: int) -> None:
        pass


class _Logins:
    def login_ended(self, mechanism: str, succeeded: bool) -> None:
        pass


class Proxy:
    """The handlers of one proxy, and what they need, made once per fuzzing process."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="kqp-fuzz-"))
        quota_file = self.directory / "quotas.toml"
        quota_file.write_text(_QUOTAS)
        self.loop = asyncio.new_event_loop()
        self.quotas = QuotaService(quota_file, CollectorRegistry())
        self.usage = UsageLog(self.directory / "usage")  # not started: a second's counters are dropped
        cluster: Any = Cluster()
        self.topic_names = TopicNames(cluster.topics_by_id)
        self.mutations = TopicMutationHandler(self.quotas, cluster, self.usage)
        self.fetch = FetchHandler(self.quotas, self.usage, self.topic_names)
        producer_ids: Any = _ProducerIds()
        self.init_producer_id = InitProducerIdHandler(self.quotas, producer_ids, producer_ids, self.usage)

        async def cluster_api_keys() -> set[int]:
            return {Api.ALTER_CLIENT_QUOTAS, Api.DESCRIBE_CLIENT_QUOTAS}

        self.client_quotas = ClientQuotaHandlers(self.quotas, cluster_api_keys, frozenset({"User:admin"}), Access())
        self.users = UserStore({"alice": {PLAIN: plain_credential("alice-secret", iterations=1),
                                          "SCRAM-SHA-256": scram_credential("SCRAM-SHA-256", "alice-secret", 4096)}})
        self.login_pool = ThreadPoolExecutor(1)
        self._now_ms = count(1_000_000_000, 250)

    def caller(self, user: str = "fuzz") -> Caller:
        """Quota time moves on a quarter second a request: buckets fill, and expire after an hour idle."""
        return Caller(user, next(self._now_ms), "127.0.0.1:9092", lambda: next(self._now_ms))

    def settled(self, decided: Decided | Awaitable[Outcome]) -> Outcome:
        if isinstance(decided, Outcome):
            return decided
        return self.loop.run_until_complete(decided)  # type: ignore[arg-type]

    def finish_tasks(self) -> None:
        """Run what a handler left for the loop to do later, to its end."""
        pending = asyncio.all_tasks(self.loop)
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending))

    def end_second(self) -> None:
        self.usage.end_second(0)  # the counters of the usage log, and what they hold, let go


_proxy: Proxy | None = None


def proxy() -> Proxy:
    global _proxy
    if _proxy is None:
        _proxy = Proxy()
    return _proxy


def answered(outcome: Outcome, upstream: bytes, api_key: int, version: int) -> None:
    """What the client gets for ``outcome``: the proxy's answer decodes; a rewritten request decodes; the cluster's
    answer (``upstream``) is finished as the connection would, a malformed one a ProtocolError."""
    if isinstance(outcome, Respond):
        frame = memoryview(outcome.response)[4:]
        flexible = is_flexible_request(api_key, version) and api_key != Api.API_VERSIONS
        decode_response(api_key, version, frame[len(encode_response_header(0, flexible)):])
    if not isinstance(outcome, Forward):
        return
    if outcome.replacement is not None:
        frame = memoryview(outcome.replacement)[4:]
        header = read_request_header(frame)
        decode_request(api_key, version, frame[header.length:])
    finish = None if outcome.on_response is None else outcome.on_response.finish
    if finish is not None:
        finished = protocol_errors(lambda: finish(memoryview(upstream)))
        if finished is not None:
            decode_response(api_key, version, finished)


# ---- the targets --------------------------------------------------------------------------------------------

def request_header_target(data: bytes) -> None:
    """Every request's first bytes: its header, read with and without the schema's flexibility (a frame is at least
    ``REQUEST_PREFIX_BYTES`` long: the splitter refuses a shorter one)."""
    frame = data[1:]
    protocol_errors(lambda: parse_request_header(frame, bool(data[:1] and data[0] & 1)))
    if len(frame) >= REQUEST_PREFIX_BYTES:
        protocol_errors(lambda: peek_request(frame))
        protocol_errors(lambda: read_request_header(frame))


def read_as_a_connection(splitter: FrameSplitter, stream: bytes, read_size: int
                         ) -> Iterator[tuple[int, bytes | bytearray, FrameEnds]]:
    """``stream`` read as the proxy's BufferedProtocol reads it, ``read_size`` at most a read: into the frame being
    read whole (``frame_space``) while there is one, else fed. After each read: how much was read in all, and the
    whole frames it completed."""
    at = 0
    while at < len(stream):
        space = splitter.frame_space()
        if space is None:
            chunk, ends = splitter.feed(stream[at:at + read_size])
            at += min(read_size, len(stream) - at)
        else:
            size = min(len(space), read_size, len(stream) - at)
            space[:size] = stream[at:at + size]
            at += size
            whole = splitter.frame_filled(size)
            chunk, ends = whole if whole is not None else (b"", array("q"))
        yield at, chunk, ends


def framing_target(data: bytes) -> None:
    """A stream cut into reads of any size, with or without a frame read whole: every whole frame comes out once,
    in order, until the stream is refused."""
    reader = Reader(data)
    read_size, whole_after = 1 + reader.byte(), reader.byte()
    stream = reader.rest()
    splitter = FrameSplitter(max_frame_bytes=1 << 16, min_frame_bytes=8)
    out = bytearray()
    try:
        for at, chunk, ends in read_as_a_connection(splitter, stream, read_size):
            assert not ends or ends[-1] == len(chunk)
            out += chunk
            if at >= whole_after * 16:
                splitter.read_whole()
    except ProtocolError:
        return
    assert stream.startswith(out), "frames out of the splitter that the stream did not hold"
    assert len(stream) - len(out) == splitter.buffered_bytes


def produce_target(data: bytes) -> None:
    """A Produce request scanned whole and as it streams by in reads of any size: the same scan, or the same
    refusal; what the proxy makes of a scan (the request without its invalid partitions, its answers) decodes."""
    reader = Reader(data)
    version = version_of(Api.PRODUCE, reader.byte(), MIN_SCANNED_PRODUCE_VERSION)
    read_size = 1 + reader.byte()
    frame = request_header(Api.PRODUCE, version) + reader.rest()
    header = parse_request_header(frame, is_flexible_request(Api.PRODUCE, version))
    protocol_errors(lambda: produce_acks(frame, header))
    try:
        whole = scan_produce(frame, header)
    except ProtocolError:
        whole = None
    streamed = StreamedProduceScan(header, len(frame))
    try:
        for at in range(0, len(frame), read_size):
            streamed.feed(frame[at:at + read_size])
    except ProtocolError:
        assert whole is None, "refused as it streamed, accepted whole"
        return
    assert streamed.scan == whole, "streamed and whole scans differ"
    if whole is None:
        return
    decode_response(Api.PRODUCE, version, produce_error_response(whole, version, 89, 100))
    decode_response(Api.PRODUCE, version, merged_produce_response(whole, version, None, 100))
    if whole.has_invalid_partitions:
        kept = produce_request_without_invalid_partitions(memoryview(frame), header, whole)
        decode_request(Api.PRODUCE, version, kept)


_MUTATIONS = (Api.CREATE_TOPICS, Api.DELETE_TOPICS, Api.CREATE_PARTITIONS)


def topic_mutations_target(data: bytes) -> None:
    """CreateTopics, DeleteTopics and CreatePartitions under a mutation quota: judged, charged, answered or
    forwarded; the cluster's answer (any bytes) merged with the proxy's."""
    reader = Reader(data)
    api_key = _MUTATIONS[reader.byte() % len(_MUTATIONS)]
    version = version_of(api_key, reader.byte())
    upstream = reader.part()
    frame = request_header(api_key, version) + reader.rest()
    here = proxy()
    outcome = protocol_errors(lambda: here.settled(handled(here.mutations, memoryview(frame), here.caller())))
    if outcome is not None:
        answered(outcome, upstream, api_key, version)
    here.end_second()


def init_producer_id_target(data: bytes) -> None:
    """InitProducerId answered from the proxy's own block, under a producer-ID quota."""
    reader = Reader(data)
    version = version_of(Api.INIT_PRODUCER_ID, reader.byte())
    frame = request_header(Api.INIT_PRODUCER_ID, version) + reader.rest()
    here = proxy()
    outcome = protocol_errors(lambda: handled(here.init_producer_id, memoryview(frame), here.caller()))
    if outcome is not None:
        answered(outcome, b"", Api.INIT_PRODUCER_ID, version)
    here.end_second()


_CLIENT_QUOTA_APIS = (Api.ALTER_CLIENT_QUOTAS, Api.DESCRIBE_CLIENT_QUOTAS)


def client_quotas_target(data: bytes) -> None:
    """AlterClientQuotas and DescribeClientQuotas from an admin principal (applied, refused per entry, forwarded
    in part) and from anyone else; the cluster's answer (any bytes) merged with the proxy's."""
    reader = Reader(data)
    api_key = _CLIENT_QUOTA_APIS[reader.byte() % 2]
    version = version_of(api_key, reader.byte())
    user = "admin" if reader.byte() % 4 else "fuzz"
    upstream = reader.part()
    frame = request_header(api_key, version) + reader.rest()
    here = proxy()
    outcome = protocol_errors(lambda: here.settled(handled(here.client_quotas, memoryview(frame), here.caller(user))))
    if outcome is not None:
        answered(outcome, upstream, api_key, version)


def fetch_target(data: bytes) -> None:
    """A Fetch request under consumer and topic quotas (read, capped, named), and the cluster's answer to it (any
    bytes): sized, charged per topic, answered empty when over a quota."""
    reader = Reader(data)
    version = version_of(Api.FETCH, reader.byte())
    limit = reader.byte() << 8 | reader.byte()
    response = reader.part()
    frame = request_header(Api.FETCH, version) + reader.rest()
    header = parse_request_header(frame, is_flexible_request(Api.FETCH, version))
    protocol_errors(lambda: fetch_asked(frame, header))
    protocol_errors(lambda: fetch_session_epoch(frame, header))
    capped = protocol_errors(lambda: capped_fetch_request(frame, header, limit))
    original = protocol_errors(lambda: decode_request(Api.FETCH, version, frame[header.length:]))
    if capped is not None:  # the same request, but for its max_bytes and min_bytes (a patch, not an encoding)
        assert len(capped) == len(frame) and capped[:header.length] == frame[:header.length]
        if original is not None:
            patched = decode_request(Api.FETCH, version, capped[header.length:])
            assert patched.max_bytes == limit and patched.min_bytes <= limit
            patched.max_bytes, patched.min_bytes = original.max_bytes, original.min_bytes
            assert patched.to_dict() == original.to_dict()
    protocol_errors(lambda: fetch_response_topic_bytes(response, version))
    protocol_errors(lambda: fetch_response_start(response, version))
    flexible = is_flexible_request(Api.FETCH, version)
    start = encode_response_header(7, flexible) + response
    protocol_errors(lambda: fetch_response_size(start, len(start), flexible))
    here = proxy()
    outcome = protocol_errors(lambda: here.settled(handled(here.fetch, memoryview(frame), here.caller())))
    hook = outcome.on_response if isinstance(outcome, Forward) else None
    if hook is not None and hook.charge is not None:
        charge = hook.charge

        async def charged_in_the_loop() -> ChargedResponse | None:  # as the connection charges: in the loop
            return protocol_errors(lambda: charge(memoryview(start), len(start)))

        charged = here.loop.run_until_complete(charged_in_the_loop())
        if charged is not None and charged.answer_body is not None:
            decode_response(Api.FETCH, version, charged.answer_body)
        here.finish_tasks()  # a topic named by an id the proxy did not know is charged once it is named
    here.end_second()


OFFSET_DELETE = 47
"""Its throttle_time_ms follows its error_code."""
_REWRITTEN: tuple[int, ...] = (
    Api.PRODUCE, Api.FETCH, Api.METADATA, Api.FIND_COORDINATOR, Api.DESCRIBE_CLUSTER, Api.API_VERSIONS,
    Api.CREATE_TOPICS, Api.DELETE_TOPICS, Api.INIT_PRODUCER_ID, OFFSET_DELETE, Api.SASL_AUTHENTICATE,
    Api.DESCRIBE_CLIENT_QUOTAS)


def _advertised(broker: BrokerAddress) -> tuple[str, int]:
    return "proxy.example", 20_000 + broker.node_id % 1000


def response_rewriting_target(data: bytes) -> None:
    """The cluster's answers as the proxy rewrites them: a throttle raised into it, broker addresses advertised as
    the proxy's, api versions capped and completed. A rewrite decodes wherever the answer did."""
    reader = Reader(data)
    api_key = _REWRITTEN[reader.byte() % len(_REWRITTEN)]
    version = version_of(api_key, reader.byte())
    throttle_ms = reader.byte() << 8 | reader.byte()
    body = reader.rest()
    decodes = protocol_errors(lambda: decode_response(api_key, version, body)) is not None
    if carries_throttle(api_key, version):
        raised = protocol_errors(lambda: raise_throttle(api_key, version, body, throttle_ms))
        if raised is not None and decodes:
            assert decode_response(api_key, version, raised).throttle_time_ms >= throttle_ms
    if carries_addresses(api_key, version):
        rewritten = protocol_errors(lambda: rewrite_broker_addresses(api_key, version, body, _advertised))
        if rewritten is not None:
            decode_response(api_key, version, rewritten)
    if api_key == Api.API_VERSIONS:
        adapted = protocol_errors(lambda: adapt_api_versions(body, version, {Api.PRODUCE: 9, Api.FETCH: 12},
                                                             {Api.ALTER_CLIENT_QUOTAS: VersionRange(0, 1)}))
        if adapted is not None:
            decode_response(api_key, version, adapted)


def sasl_tokens_target(data: bytes) -> None:
    """What a client says in a login: PLAIN's token, SCRAM's messages, OAUTHBEARER's JWT."""
    login_errors = allowed(AuthenticationFailed, ProtocolError)
    login_errors(lambda: parse_plain_token(data))
    text = data.decode("utf-8", errors="surrogateescape")
    login_errors(lambda: parse_scram_client_first(text))
    login_errors(lambda: scram_attributes(text))
    token = login_errors(lambda: parse_oauthbearer_token(data))
    if token is not None:
        login_errors(lambda: oauthbearer_principal(token, "sub"))


_SASL_APIS = (Api.SASL_HANDSHAKE, Api.SASL_AUTHENTICATE)


def sasl_login_target(data: bytes) -> None:
    """A connection's login, terminated by the proxy: up to four SaslHandshake or SaslAuthenticate requests, each
    answered or refused as Kafka's authenticator would (PLAIN, SCRAM-SHA-256 and unsecured OAUTHBEARER on)."""
    here = proxy()
    login = SaslServer(here.users, UnsecuredJwtValidator(OAuthBearerSettings(unsecured_jwt=True)),
                       LoginSettings(failed_delay_s=0), here.login_pool, "fuzz:1", _Logins())
    reader = Reader(data)
    for _ in range(4):
        api_key = _SASL_APIS[reader.byte() % 2]
        version = version_of(api_key, reader.byte())
        frame = request_header(api_key, version) + reader.part()
        outcome = protocol_errors(lambda: here.settled(login.handle(memoryview(frame))))  # noqa: B023
        if outcome is None or isinstance(outcome, Close) or outcome.close_after_response or login.done:
            return
        answered(outcome, b"", api_key, version)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "request_header": request_header_target,
    "framing": framing_target,
    "produce": produce_target,
    "topic_mutations": topic_mutations_target,
    "init_producer_id": init_producer_id_target,
    "client_quotas": client_quotas_target,
    "fetch": fetch_target,
    "response_rewriting": response_rewriting_target,
    "sasl_tokens": sasl_tokens_target,
    "sasl_login": sasl_login_target,
}
