"""What the handler tests read in a decision: what was forwarded, what becomes of the answer, what was answered."""

from __future__ import annotations

from proxy.decision.outcome import Decided, Forward, OnResponse, Respond, ResponseCharge, ResponseFinisher


def forwarded(decided: Decided) -> Forward:
    assert isinstance(decided, Forward), decided
    return decided


def on_response(decided: Decided) -> OnResponse:
    hook = forwarded(decided).on_response
    assert hook is not None
    return hook


def charge_of(decided: Decided) -> ResponseCharge:
    charge = on_response(decided).charge
    assert charge is not None
    return charge


def finish_of(decided: Decided) -> ResponseFinisher:
    finish = on_response(decided).finish
    assert finish is not None
    return finish


def answered(decided: Decided) -> Respond:
    assert isinstance(decided, Respond), decided
    return decided
