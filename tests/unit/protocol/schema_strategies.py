"""Hypothesis strategies for any Kafka message, generated from kafka-python's JSON schemas."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from kafka.protocol.schemas.fields.base import BaseField

_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "float64": st.floats(allow_nan=False, allow_infinity=False),
    "bool": st.booleans(),
    "string": st.text(max_size=12),
    "bytes": st.binary(max_size=24),
    "records": st.binary(max_size=24),
    # kafka-python reads Kafka's ZERO_UUID back as None, so generate only non-zero ids
    "uuid": st.uuids().filter(lambda value: value.int != 0),
}


def _in(versions: str | None, version: int) -> bool:
    parsed = BaseField.parse_versions(versions)
    return parsed is not None and parsed[0] <= version <= parsed[1]


def _field_strategy(owner: type, field: dict[str, Any], version: int) -> st.SearchStrategy[Any] | None:
    kind: str = field["type"]
    nullable = _in(field.get("nullableVersions"), version)
    if kind.startswith("[]"):
        inner = kind[2:]
        if inner in _PRIMITIVES:
            items: st.SearchStrategy[Any] | None = _PRIMITIVES[inner]
        else:
            items = struct_strategy(getattr(owner, inner), field["fields"], version)
        if items is None:
            return None
        values: st.SearchStrategy[Any] = st.lists(items, max_size=3)
    elif kind in _PRIMITIVES:
        values = _PRIMITIVES[kind]
    elif kind[:1].isupper() and "fields" in field:
        values = struct_strategy(getattr(owner, kind), field["fields"], version)
    else:
        return None  # kafka-python's patched types (bitfields): left at their defaults
    return st.none() | values if nullable else values


def struct_strategy(cls: type, fields: list[dict[str, Any]], version: int) -> st.SearchStrategy[Any]:
    strategies = {}
    for field in fields:
        if not _in(field.get("versions"), version):
            continue
        strategy = _field_strategy(cls, field, version)
        if strategy is not None:
            strategies[BaseField.underscore_name(field["name"])] = strategy
    return st.fixed_dictionaries(strategies).map(lambda values: cls(version=version, **values))


def message_strategy(cls: type, version: int) -> st.SearchStrategy[Any]:
    return struct_strategy(cls, cls.json["fields"], version)  # type: ignore[attr-defined]


