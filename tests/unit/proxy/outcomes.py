"""How the handler tests hand a handler a request, and what they read in its decision: what was forwarded, what
becomes of the answer, what was answered."""

from __future__ import annotations

from protocol.header import read_request_header
from proxy.decision.interception import RequestHandler
from proxy.decision.outcome import Caller, Decided, Forward, OnResponse, Respond, ResponseCharge, ResponseFinisher


def handled(handler: RequestHandler, frame: memoryview, caller: Caller) -> Decided:
    """``handler``'s decision on a whole request (size prefix excluded), given as the chain gives it: its header
    read first."""
    return handler.on_request(read_request_header(frame), frame, caller)


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
