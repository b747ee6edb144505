from __future__ import annotations

from proxy.connection.close_reason import CloseReason


def test_the_log_line_gives_the_reasons_words_then_what_this_close_adds() -> None:
    assert CloseReason.IDLE.describe() == "idle"
    assert CloseReason.BAD_REQUEST.describe("unknown api key") == "bad request frame: unknown api key"


def test_what_clients_do_every_day_is_no_warning_and_what_an_operator_must_see_is() -> None:
    everyday = {CloseReason.CLIENT_LEFT, CloseReason.IDLE, CloseReason.LOGIN_REFUSED, CloseReason.LOGIN_TOO_SLOW,
                CloseReason.NO_PRINCIPAL, CloseReason.OVER_USER_CONNECTION_RATE, CloseReason.CLOSE_AFTER_RESPONSE,
                CloseReason.SHUTDOWN, CloseReason.UPSTREAM_LOST, CloseReason.SHUTDOWN_DEADLINE}
    assert {reason for reason in CloseReason if not reason.warns} == everyday
    assert len({reason.words for reason in CloseReason}) == len(CloseReason), "two reasons read the same"
