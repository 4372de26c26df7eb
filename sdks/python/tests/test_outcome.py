"""The outcome ladder, rung by rung, without a server."""

from __future__ import annotations

from typing import Any

import rdq
from rdq.outcome import Kind, Ladder


class Declined(Exception):
    pass


class HardDeclined(Declined):
    pass


class Flaky(Exception):
    pass


class NetworkDown(ConnectionError):
    pass


def test_a_return_of_any_value_is_success() -> None:
    for value in (None, False, 0, "", {"status": "FAILED"}):
        assert Ladder().resolve(value, None).kind is Kind.SUCCESS


def test_an_unclassified_exception_is_left_to_the_queue_globs() -> None:
    out = Ladder().resolve(None, KeyError("missing"))
    assert out.kind is Kind.FAILURE
    assert out.error is not None and out.error.type == "KeyError"


def test_error_type_is_the_qualified_class_name() -> None:
    assert rdq.error_type_of(ValueError()) == "ValueError"
    assert rdq.error_type_of(Declined()) == "test_outcome.Declined"
    assert rdq.error_type_of(rdq.InvalidRequest("X")) == "rdq.errors.InvalidRequest"


def test_permanent_wrapper_records_the_cause() -> None:
    cause = Declined("card declined")
    out = Ladder(retryable=(Declined,)).resolve(None, rdq.Permanent(cause))
    assert out.kind is Kind.PERMANENT_FAILURE
    assert out.error is not None
    assert (out.error.type, out.error.message) == ("test_outcome.Declined", "card declined")
    assert out.error.stack is not None and "Declined: card declined" in out.error.stack


def test_a_wrapped_message_is_an_error_of_type_rdq_error() -> None:
    out = Ladder().resolve(None, rdq.Retryable("upstream busy"))
    assert out.error is not None and (out.error.type, out.error.message) == ("rdq.Error", "upstream busy")


def test_retryable_wrapper_beats_a_permanent_classifier() -> None:
    out = Ladder(permanent=(Declined,)).resolve(None, rdq.Retryable(Declined("x")))
    assert out.kind is Kind.RETRYABLE_FAILURE


def test_a_wrapper_may_name_the_error() -> None:
    out = Ladder().resolve(None, rdq.Permanent("over the limit", error_type="billing.Limit", detail={"n": 3}))
    assert out.error is not None
    assert (out.error.type, out.error.message, out.error.detail) == ("billing.Limit", "over the limit", {"n": 3})


def test_classifiers_match_subclasses_and_permanent_wins() -> None:
    ladder = Ladder(retryable=(Exception,), permanent=(Declined,))
    assert ladder.resolve(None, HardDeclined("x")).kind is Kind.PERMANENT_FAILURE
    assert ladder.resolve(None, Flaky("x")).kind is Kind.RETRYABLE_FAILURE
    assert Ladder(retryable=(ConnectionError,)).resolve(None, NetworkDown()).kind is Kind.RETRYABLE_FAILURE


def test_classifiers_follow_the_cause_chain() -> None:
    try:
        try:
            raise HardDeclined("inner")
        except HardDeclined as inner:
            raise RuntimeError("charging failed") from inner
    except RuntimeError as outer:
        out = Ladder(permanent=(Declined,)).resolve(None, outer)
    assert out.kind is Kind.PERMANENT_FAILURE
    assert out.error is not None and out.error.type == "RuntimeError"


def test_defer_spends_no_attempt() -> None:
    out = Ladder(permanent=(Exception,)).resolve(None, rdq.Defer(2.5, throttle="key"))
    assert (out.kind, out.defer_ms, out.throttle) == (Kind.DEFER, 2500, "key")


def test_the_mapper_is_authoritative_and_supplies_the_error() -> None:
    def mapper(ret: Any, exc: BaseException | None) -> rdq.Outcome:
        if isinstance(exc, Declined):
            return rdq.Outcome.success()  # an idempotent replay
        if ret is False:
            return rdq.Outcome.permanent_failure("rejected by the bank", error_type="bank.Rejected")
        return rdq.Outcome.success()

    ladder = Ladder(mapper, permanent=(Declined,))
    assert ladder.resolve(None, rdq.Permanent(Declined())).kind is Kind.SUCCESS
    out = ladder.resolve(False, None)
    assert out.kind is Kind.PERMANENT_FAILURE
    assert out.error is not None and (out.error.type, out.error.message) == ("bank.Rejected", "rejected by the bank")


def test_a_failing_mapper_is_a_retryable_failure() -> None:
    def mapper(ret: Any, exc: BaseException | None) -> rdq.Outcome:
        raise ZeroDivisionError

    out = Ladder(mapper).resolve(None, None)
    assert out.kind is Kind.RETRYABLE_FAILURE
    assert out.error is not None and out.error.type == "rdq.OutcomeMapperFailed"


def test_a_per_handler_mapper_replaces_the_worker_one() -> None:
    ladder = Ladder(lambda ret, exc: rdq.Outcome.success())
    out = ladder.resolve(None, None, lambda ret, exc: rdq.Outcome.retryable_failure("no"))
    assert out.kind is Kind.RETRYABLE_FAILURE


def test_recorded_text_is_cut_with_the_marker_on_a_character_boundary() -> None:
    err = rdq.ReportedError("T", "é" * 5000, None, "x" * 70000).to_json()
    message, stack = str(err["message"]), str(err["stack"])
    assert len(message.encode()) <= 4096 and message.endswith("…[truncated]")
    assert message.removesuffix("…[truncated]") == "é" * ((4096 - len("…[truncated]".encode())) // 2)
    assert len(stack.encode()) == 65536 and stack.endswith("…[truncated]")
