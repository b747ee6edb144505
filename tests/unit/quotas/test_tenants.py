"""Tenants in the quota file, which tenant a principal and a topic belong to, and what the caps refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from quotas.config import QuotaConfigError, QuotaEntity, QuotaType, load_quota_file
from quotas.overrides import overlaid
from quotas.tenants import (
    IN_FLIGHT_TTL_MS,
    Creation,
    CreationsInFlight,
    Tenant,
    Tenants,
    refusals,
    tenants_to_count,
)

PAYMENTS = """
[[tenant]]
name = "payments"
users = ["pay-api", "ledger"]
user-prefix = "pay-"
topic-prefix = "payments."
max_partitions = 50
max_topics = 4
topics-only-under-prefix = true

[[tenant]]
name = "search"
user-prefix = "search-"
topic-prefix = "search."
"""


def tenants_of(text: str, tmp_path: Path) -> Tenants:
    path = tmp_path / "quotas.toml"
    path.write_text(text)
    return load_quota_file(path).tenants


def test_a_principal_belongs_to_its_tenant_by_name_or_prefix_and_a_topic_by_prefix(tmp_path: Path) -> None:
    tenants = tenants_of(PAYMENTS, tmp_path)
    payments, search = tenants.all
    assert payments == Tenant("payments", frozenset({"pay-api", "ledger"}), "pay-", "payments.", 50, 4, True)
    assert tenants.of_user("ledger") is payments and tenants.of_user("pay-batch") is payments
    assert tenants.of_user("search-indexer") is search and tenants.of_user("alice") is None
    assert tenants.owner_of("payments.eu") is payments and tenants.owner_of("search.x") is search
    assert tenants.owner_of("payments") is None  # the prefix is "payments."
    assert tenants.capped and not search.capped


def test_a_tenant_that_is_not_limited_to_a_prefix_may_say_so_without_one(tmp_path: Path) -> None:
    tenants = tenants_of('[[tenant]]\nname = "a"\nusers = ["x"]\ntopics-only-under-prefix = false\n', tmp_path)
    assert not tenants.capped


def test_a_file_without_tenants_has_none_and_overrides_keep_the_files(tmp_path: Path) -> None:
    assert not tenants_of('[[quota]]\nuser = "a"\nproducer_byte_rate = 1000\n', tmp_path).all
    tenants = tenants_of(PAYMENTS, tmp_path)
    altered = overlaid(load_quota_file(tmp_path / "quotas.toml"),
                       {QuotaEntity(user="a"): {QuotaType.PRODUCER_BYTE_RATE: 2000}}, None)
    assert altered.tenants.all == tenants.all


@pytest.mark.parametrize(("text", "message"), [
    ('[[tenant]]\nname = "a"\nusers = ["x"]\n[[tenant]]\nname = "b"\nusers = ["y", "x"]\n',
     "[[tenant]] #2 (b) and [[tenant]] #1 (a) both name user 'x'"),
    ('[[tenant]]\nname = "a"\nuser-prefix = "team-"\n[[tenant]]\nname = "b"\nusers = ["team-b"]\n',
     "[[tenant]] #2 (b) and [[tenant]] #1 (a) both take user 'team-b' (a by its user-prefix 'team-')"),
    ('[[tenant]]\nname = "a"\nusers = ["team-a"]\n[[tenant]]\nname = "b"\nuser-prefix = "team"\n',
     "[[tenant]] #2 (b) and [[tenant]] #1 (a) both take user 'team-a' (b by its user-prefix 'team')"),
    ('[[tenant]]\nname = "a"\nuser-prefix = "team-"\n[[tenant]]\nname = "b"\nuser-prefix = "team-b"\n',
     "[[tenant]] #2 (b) and [[tenant]] #1 (a) have overlapping user prefixes 'team-b' and 'team-'"),
    ('[[tenant]]\nname = "a"\nusers = ["x"]\ntopic-prefix = "pay"\n'
     '[[tenant]]\nname = "b"\nusers = ["y"]\ntopic-prefix = "payments."\n',
     "[[tenant]] #2 (b) and [[tenant]] #1 (a) have overlapping topic prefixes 'payments.' and 'pay'"),
    ('[[tenant]]\nname = "a"\nusers = ["x"]\n[[tenant]]\nname = "a"\nusers = ["y"]\n',
     "[[tenant]] #2 (a): the name of [[tenant]] #1 (a) already"),
    ('[[tenant]]\nname = "a"\nusers = ["x"]\nmax_partitions = 0\n',
     "[[tenant]] #1 (a): max_partitions needs a topic-prefix"),
    ('[[tenant]]\nname = "a"\nusers = ["x"]\ntopic-prefix = "a."\nmax_partitions = -1\n',
     "[[tenant]] #1 (a): max_partitions must be a whole number of at least 0, got -1"),
    ('[[tenant]]\nname = "a"\nusers = ["x"]\ntopic-prefix = "a."\nmax_topics = 2.5\n',
     "[[tenant]] #1 (a): max_topics must be a whole number of at least 0, got 2.5"),
    ('[[tenant]]\nname = "a"\nusers = ["x"]\nmax_partitions = 10\n',
     "[[tenant]] #1 (a): max_partitions needs a topic-prefix"),
    ('[[tenant]]\nname = "a"\nusers = ["x"]\ntopics-only-under-prefix = true\n',
     "[[tenant]] #1 (a): topics-only-under-prefix needs a topic-prefix"),
    ('[[tenant]]\nname = "a"\nusers = ["x"]\ntopic-prefix = "a."\ntopics-only-under-prefix = "yes"\n',
     "[[tenant]] #1 (a): topics-only-under-prefix must be true or false, got 'yes'"),
    ('[[tenant]]\nname = "a"\ntopic-prefix = "a."\n', "[[tenant]] #1 (a): names no principal (users, user-prefix)"),
    ('[[tenant]]\nusers = ["x"]\n', "[[tenant]] #1: needs a name (a non-empty string), got None"),
    ('[[tenant]]\nname = "a"\nusers = ["x"]\nproducer_byte_rate = 1\n', "[[tenant]] #1 (a): unknown key(s) "
                                                                         "producer_byte_rate"),
    ('[[tenant]]\nname = "a"\nusers = "x"\n', "[[tenant]] #1 (a): users must be a list of non-empty strings"),
    ('[[tenant]]\nname = "a"\nusers = ["x"]\ntopic-prefix = "a/"\n',
     "[[tenant]] #1 (a): topic-prefix must be the start of a Kafka topic name"),
    ('tenant = 3\n', "'tenant' must be an array of tables ([[tenant]])"),
])
def test_bad_tenants_are_refused_with_the_file_and_entries_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(QuotaConfigError) as raised:
        tenants_of(text, tmp_path)
    assert str(raised.value).startswith(f"{tmp_path / 'quotas.toml'}: {message}"), str(raised.value)


def payments(max_partitions: int | None = 50, max_topics: int | None = None, only_under_prefix: bool = False) -> Tenant:
    return Tenant("payments", frozenset({"pay-api"}), None, "payments.", max_partitions, max_topics,
                  only_under_prefix)


def test_entries_are_refused_in_request_order_once_the_cap_is_reached() -> None:
    tenants = Tenants([payments(max_partitions=50)])
    creations = {0: Creation("payments.a", 6, True), 1: Creation("payments.b", 6, True),
                 2: Creation("payments.c", 2, True), 3: Creation("other", 100, True)}
    refused = refusals(tenants, "alice", creations, {"payments": {"payments.x": 30, "payments.y": 10}})
    # 40 + 6 = 46 is within the cap; 46 + 6 = 52 is not; 46 + 2 = 48 is; "other" belongs to no tenant
    assert refused == {1: "Tenant payments owns 46 partition(s) under 'payments.'; 6 more would be over its cap of 50."}


def test_a_topic_counts_once_at_the_most_partitions_anything_gives_it() -> None:
    """An increase of a topic being created, a creation asked again (after a timeout), a topic seen created that the
    metadata no longer shows created again: each counts what it adds to the topic, not the topic again."""
    tenants = Tenants([payments(max_partitions=20, max_topics=2)])
    owned = {"payments": {"payments.a": 10, "payments.b": 4}}
    assert refusals(tenants, "x", {0: Creation("payments.a", 15, False), 1: Creation("payments.b", 4, True),
                                   2: Creation("payments.b", 5, False)}, owned) == {}  # 10 + 5 + 4 + 1 = 20
    assert refusals(tenants, "x", {0: Creation("payments.a", 17, False)}, owned) == {
        0: "Tenant payments owns 14 partition(s) under 'payments.'; 7 more would be over its cap of 20."}


def test_a_partition_increase_counts_and_a_cap_of_zero_refuses_everything() -> None:
    assert refusals(Tenants([payments(max_partitions=10)]), "pay-api", {0: Creation("payments.a", 8, False)},
                    {"payments": {"payments.a": 5, "payments.b": 3}}) == {
        0: "Tenant payments owns 8 partition(s) under 'payments.'; 3 more would be over its cap of 10."}
    assert list(refusals(Tenants([payments(max_partitions=0)]), "x", {0: Creation("payments.a", 1, True)},
                         {"payments": {}})) == [0]


def test_the_topic_cap_counts_new_topics_only() -> None:
    tenants = Tenants([payments(max_partitions=None, max_topics=2)])
    creations = {0: Creation("payments.a", 1, True), 1: Creation("payments.old", 6, False),
                 2: Creation("payments.b", 1, True)}
    assert refusals(tenants, "x", creations, {"payments": {"payments.old": 1}}) == {
        2: "Tenant payments owns 2 topic(s) under 'payments.'; one more would be over its cap of 2."}


def test_a_tenant_limited_to_its_prefix_creates_nothing_elsewhere_and_others_may() -> None:
    tenants = Tenants([payments(max_partitions=None, only_under_prefix=True)])
    creations = {0: Creation("payments.a", 1, True), 1: Creation("scratch", 1, True), 2: Creation("scratch", 5, False)}
    assert refusals(tenants, "pay-api", creations, {}) == {
        1: "Tenant payments may create topics only under its prefix 'payments.': 'scratch' is not."}
    assert refusals(tenants, "alice", creations, {}) == {}


def test_only_capped_tenants_owning_a_named_topic_are_counted() -> None:
    capped, uncapped = payments(), Tenant("search", frozenset({"s"}), None, "search.")
    tenants = Tenants([capped, uncapped])
    assert tenants_to_count(tenants, ["search.a", "x", "payments.a", "payments.b"]) == [capped]
    assert tenants_to_count(tenants, ["search.a"]) == []


def test_creations_in_flight_count_until_their_own_answer_or_a_minute() -> None:
    tenant = payments()
    in_flight = CreationsInFlight()
    new = in_flight.add([Creation("payments.new", 3, True), Creation("search.x", 9, True)], now_ms=0)
    to_six = in_flight.add([Creation("payments.old", 6, False)], now_ms=0)
    to_eight = in_flight.add([Creation("payments.old", 8, False)], now_ms=0)
    in_cluster = {"payments.old": 4, "search.x": 1}
    assert in_flight.creating("payments.new", now_ms=1) and not in_flight.creating("payments.old", now_ms=1)
    assert in_flight.owned_with(tenant, in_cluster, now_ms=1) == {"payments.new": 3, "payments.old": 8}
    # the cluster shows the new topic and the first increase before their answers came: each counted once
    assert in_flight.owned_with(tenant, {**in_cluster, "payments.new": 3, "payments.old": 6}, now_ms=1) == {
        "payments.new": 3, "payments.old": 8}
    in_flight.answered(to_six)  # its answer lets go of its own hold only
    assert in_flight.owned_with(tenant, in_cluster, now_ms=1) == {"payments.new": 3, "payments.old": 8}
    in_flight.answered(to_eight)
    assert in_flight.owned_with(tenant, in_cluster, now_ms=1) == {"payments.new": 3, "payments.old": 4}
    assert in_flight.owned_with(tenant, in_cluster, now_ms=IN_FLIGHT_TTL_MS) == {"payments.old": 4}  # no answer came
    in_flight.answered(new)  # already gone: nothing happens


def test_the_documented_tenants_load(tmp_path: Path) -> None:
    page = (Path(__file__).parents[3] / "docs" / "quotas.md").read_text()
    section = page[page.index("## Tenants: one budget"):]
    example = section[section.index("```toml\n") + len("```toml\n"):section.index("```\n", section.index("```toml"))]
    tenants = tenants_of(example, tmp_path)
    assert [tenant.name for tenant in tenants.all] == ["payments", "search"]
    assert tenants.of_user("pay-batch") is tenants.of_user("ledger") is tenants.all[0]


def test_a_cap_governs_a_capped_tenants_topics_and_what_a_prefix_bound_principal_creates_elsewhere() -> None:
    tenants = Tenants([payments(max_partitions=None, only_under_prefix=True),
                       Tenant("search", frozenset({"s"}), None, "search.", 10)])
    assert tenants.governs("search.a") and not tenants.governs("payments.a")
    assert tenants.governs("scratch", "pay-api") and not tenants.governs("payments.a", "pay-api")
    assert not tenants.governs("scratch", "alice") and not tenants.governs("scratch")
