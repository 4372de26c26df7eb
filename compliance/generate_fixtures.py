#!/usr/bin/env python3
"""Generates compliance/fixtures (valid/, invalid/, manifest.json).

Run: python3 compliance/generate_fixtures.py [OUT_DIR]  (default: the
fixtures folder beside this script). README.md is written by hand and not
touched here.
"""
import base64
import copy
import json
import os
import shutil
import sys

OUT = (
    sys.argv[1]
    if len(sys.argv) > 1
    else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
)
MIB = 1024 * 1024

TOP_ORDER = [
    "envelope_version", "id", "queue", "handler_ref", "handler_version", "payload",
    "payload_content_type", "payload_ref", "headers", "status", "priority",
    "deferral_count", "attempt_count", "redrive_count", "next_attempt_at",
    "lease_expires_at", "created_at", "attempts",
]
ATTEMPT_ORDER = ["attempt_no", "started_at", "finished_at", "outcome", "error"]
ERROR_ORDER = ["type", "message", "detail", "stack"]


def sort_all(v):
    """Unknown / free-form JSON: every object's keys sorted by code point."""
    if isinstance(v, dict):
        return {k: sort_all(v[k]) for k in sorted(v)}
    if isinstance(v, list):
        return [sort_all(x) for x in v]
    return v


def order(obj, known, sub=None):
    out = {}
    for k in known:
        if k in obj:
            val = obj[k]
            if sub and k in sub and val is not None:
                val = sub[k](val)
            else:
                val = sort_all(val)
            out[k] = val
    for k in sorted(x for x in obj if x not in known):
        out[k] = sort_all(obj[k])
    return out


def canon_error(e):
    return order(e, ERROR_ORDER)


def canon_attempt(a):
    return order(a, ATTEMPT_ORDER, {"error": canon_error})


def canon_env(env):
    return order(env, TOP_ORDER, {"attempts": lambda xs: [canon_attempt(x) for x in xs]})


def canonical_bytes(env):
    return json.dumps(canon_env(env), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def pretty_bytes(obj):
    return (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


SEED_TEXT = r'''{
  "envelope_version": 1,
  "id": "01J2ZK7Q8XW5H3N9G4T6B8RDQ0",
  "queue": "payments.charge",
  "handler_ref": "charge-payment",
  "handler_version": "v3",
  "payload": "eyJvcmRlcl9pZCI6IDQyfQ==",
  "payload_content_type": "application/json",
  "headers": {
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "rdq.source": "kafka://payments/3/42351",
    "rdq.submitted_by": "checkout-service"
  },
  "status": "PENDING",
  "attempt_count": 2,
  "redrive_count": 0,
  "next_attempt_at": "2026-07-20T14:05:22.117Z",
  "lease_expires_at": null,
  "created_at": "2026-07-20T14:03:22.117Z",
  "attempts": [
    {
      "attempt_no": 1,
      "started_at": "2026-07-20T14:03:22.200Z",
      "finished_at": "2026-07-20T14:03:22.950Z",
      "outcome": "RETRYABLE_FAILURE",
      "error": {
        "type": "java.net.SocketTimeoutException",
        "message": "connect timed out after 500ms",
        "detail": null,
        "stack": "java.net.SocketTimeoutException: connect timed out\n\tat java.base/sun.nio.ch.NioSocketImpl.timedFinishConnect(NioSocketImpl.java:546)\n\tat java.base/java.net.Socket.connect(Socket.java:751)"
      }
    }
  ]
}
'''

SEED = json.loads(SEED_TEXT)


def seed():
    return copy.deepcopy(SEED)


def base_pending():
    """A small PENDING envelope with no attempts."""
    return {
        "envelope_version": 1,
        "id": "01J3A4B5C6D7E8F9G0H1J2K3M4",
        "queue": "emails.send",
        "handler_ref": "send-email",
        "handler_version": "2024.1",
        "payload": base64.b64encode(b'{"to":"ops@example.com"}').decode(),
        "payload_content_type": "application/json",
        "headers": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        "status": "PENDING",
        "attempt_count": 0,
        "redrive_count": 0,
        "next_attempt_at": "2026-07-20T14:03:22.117Z",
        "lease_expires_at": None,
        "created_at": "2026-07-20T14:03:22.117Z",
        "attempts": [],
    }


cases = []
names = set()


def write(rel, data):
    path = os.path.join(OUT, rel)
    with open(path, "wb") as f:
        f.write(data)


def add_valid(name, desc, data, canonical=False, max_bytes=None):
    if isinstance(data, dict):
        data = canonical_bytes(data) if canonical else pretty_bytes(data)
    assert name not in names, name
    names.add(name)
    rel = f"valid/{name}.json"
    write(rel, data)
    case = {"name": name, "file": rel, "valid": True}
    if canonical:
        case["canonical"] = True
    if max_bytes is not None:
        case["max_bytes"] = max_bytes
    case["description"] = desc
    cases.append(case)


def add_invalid(name, desc, data, code, path=None, max_bytes=None):
    if isinstance(data, dict) or isinstance(data, list):
        data = pretty_bytes(data)
    elif isinstance(data, str):
        data = data.encode("utf-8")
    assert name not in names, name
    names.add(name)
    rel = f"invalid/{name}.json"
    write(rel, data)
    case = {"name": name, "file": rel, "valid": False, "code": code}
    if path is not None:
        case["path"] = path
    if max_bytes is not None:
        case["max_bytes"] = max_bytes
    case["description"] = desc
    cases.append(case)


def main():
    for sub in ("valid", "invalid"):
        d = os.path.join(OUT, sub)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)

    # ------------------------------------------------------------------ valid
    add_valid("seed_concrete_envelope", "The example envelope of docs/envelope.md, pretty-printed as there, with the elided traceparent and stack filled in.", SEED_TEXT.encode())
    add_valid("seed_canonical", "That example envelope in canonical form: compact, known fields in order. Re-encoding must reproduce these bytes exactly.", seed(), canonical=True)

    e = base_pending()
    add_valid("status_pending", "A fresh PENDING task: no attempts yet (empty array), due now, no lease.", e)

    e = base_pending()
    e.update(status="IN_FLIGHT", attempt_count=1, next_attempt_at=None,
             lease_expires_at="2026-07-20T14:08:22.200Z",
             attempts=[{"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z",
                        "finished_at": None, "outcome": None, "error": None}])
    add_valid("status_in_flight_open_attempt", "IN_FLIGHT under a lease, with an open attempt: finished_at, outcome and error all null.", e)

    e = base_pending()
    e.update(status="IN_FLIGHT", attempt_count=1, next_attempt_at=None,
             lease_expires_at="2026-07-20T14:08:22.200Z",
             attempts=[{"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z"}])
    add_valid("status_in_flight_open_attempt_fields_absent", "IN_FLIGHT with an open attempt whose finished_at, outcome and error are absent rather than null; re-encoding must not add them.", e)

    e = base_pending()
    e.update(status="SUCCEEDED", attempt_count=1, next_attempt_at=None,
             attempts=[{"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z",
                        "finished_at": "2026-07-20T14:03:22.310Z", "outcome": "SUCCESS", "error": None}])
    add_valid("status_succeeded", "SUCCEEDED (terminal): next_attempt_at null, one SUCCESS attempt with a null error.", e)

    e = base_pending()
    e.update(status="DEAD", attempt_count=3, next_attempt_at=None, attempts=[
        {"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z", "finished_at": "2026-07-20T14:03:22.950Z",
         "outcome": "RETRYABLE_FAILURE", "error": {"type": "java.net.SocketTimeoutException", "message": "connect timed out after 500ms", "detail": None, "stack": None}},
        {"attempt_no": 2, "started_at": "2026-07-20T14:03:24.000Z", "finished_at": "2026-07-20T14:03:24.600Z",
         "outcome": "RETRYABLE_FAILURE", "error": {"type": "java.net.SocketTimeoutException", "message": "connect timed out after 500ms", "detail": None, "stack": None}},
        {"attempt_no": 3, "started_at": "2026-07-20T14:03:28.000Z", "finished_at": "2026-07-20T14:03:28.100Z",
         "outcome": "PERMANENT_FAILURE", "error": {"type": "com.example.InvalidCardException", "message": "card 4242 declined: do not honor", "detail": None, "stack": None}},
    ])
    add_valid("status_dead", "DEAD (in the DLQ) after three attempts; the full failure history travels with it.", e)

    for outcome, err, desc in [
        ("SUCCESS", None, "An attempt with outcome SUCCESS and no error field at all."),
        ("RETRYABLE_FAILURE", {"type": "io.grpc.StatusRuntimeException", "message": "UNAVAILABLE: upstream connect error", "stack": "io.grpc.StatusRuntimeException: UNAVAILABLE\n\tat io.grpc.stub.ClientCalls.toStatusRuntimeException(ClientCalls.java:268)"},
         "An attempt with outcome RETRYABLE_FAILURE, error with a stack and no detail field."),
        ("PERMANENT_FAILURE", {"type": "*errors.errorString", "message": "invalid order: quantity must be positive"},
         "An attempt with outcome PERMANENT_FAILURE; Go-style error type (%T), only type and message present."),
        ("LEASE_EXPIRED", {"type": "rdq.LeaseExpired", "message": "lease expired at 2026-07-20T14:08:22.200Z without a reported outcome"},
         "An attempt with outcome LEASE_EXPIRED as the engine records it: type rdq.LeaseExpired, a message stating the deadline, no stack."),
    ]:
        e = base_pending()
        attempt = {"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z",
                   "finished_at": "2026-07-20T14:08:22.200Z" if outcome == "LEASE_EXPIRED" else "2026-07-20T14:03:22.950Z",
                   "outcome": outcome}
        if err is not None:
            attempt["error"] = err
        e.update(attempt_count=1, attempts=[attempt],
                 status="SUCCEEDED" if outcome == "SUCCESS" else ("DEAD" if outcome == "PERMANENT_FAILURE" else "PENDING"))
        if outcome in ("SUCCESS", "PERMANENT_FAILURE"):
            e["next_attempt_at"] = None
        else:
            e["next_attempt_at"] = "2026-07-20T14:10:00.000Z"
        add_valid("outcome_" + outcome.lower(), desc, e)

    e = base_pending()
    e.update(attempt_count=0, redrive_count=1, attempts=[
        {"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z", "finished_at": "2026-07-20T14:03:22.950Z",
         "outcome": "PERMANENT_FAILURE", "error": {"type": "KeyError", "message": "'customer_id'", "detail": None, "stack": None}},
    ], next_attempt_at="2026-07-21T09:00:00.000Z")
    add_valid("redriven_history_kept", "A task redriven from the DLQ: attempt_count reset to 0, redrive_count 1, the earlier attempt still in the history.", e)

    e = base_pending()
    e.update(status="DEAD", attempt_count=1, next_attempt_at=None, attempts=[
        {"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z", "finished_at": "2026-07-20T14:03:22.950Z",
         "outcome": "PERMANENT_FAILURE", "error": {
             "type": "com.example.ValidationException", "message": "2 fields failed validation",
             "detail": {"fields": [{"name": "amount", "reason": "negative", "value": -5},
                                   {"name": "currency", "reason": "unknown", "value": "XXX"}],
                        "retryable": False, "http_status": 422, "score": 0.25, "nested": {"empty": {}, "list": [], "none": None}},
             "stack": None}},
    ])
    add_valid("error_detail_object", "An error whose detail is a structured JSON object (nested objects, arrays, booleans, numbers, null); detail is kept as written.", e)

    e = base_pending()
    e.update(status="DEAD", attempt_count=1, next_attempt_at=None, attempts=[
        {"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z", "finished_at": "2026-07-20T14:03:22.950Z",
         "outcome": "PERMANENT_FAILURE", "error": {"type": "mapper.Rejected", "message": "rejected", "detail": ["E100", "E204", 3]}},
    ])
    add_valid("error_detail_array", "An error whose detail is a JSON array rather than an object.", e)

    unknown_top = {
        "x_tenant": "acme",
        "x_nested": {"z": 1, "a": {"deep": [1, 2, {"k": "v"}]}, "m": None},
        "x_array": [1, "two", 3.5, True, None, {"b": 2, "a": 1}, []],
        "x_unicode": "Grüße, 世界 🌍",
        "x_numbers": {"int": 42, "negative": -17, "zero": 0, "fraction": 0.125, "big": 9007199254740991},
        "x_bool": False,
        "x_null": None,
        "x_empty_object": {},
    }
    e = base_pending()
    e.update(unknown_top)
    add_valid("unknown_fields_top_level", "Unknown top-level fields of every JSON type (nested objects, arrays, unicode text, integers, fractions, booleans, null) must be kept.", e)

    e = base_pending()
    e.update(attempt_count=1, attempts=[{
        "attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z", "finished_at": "2026-07-20T14:03:22.950Z",
        "outcome": "RETRYABLE_FAILURE",
        "error": {"type": "TimeoutError", "message": "timed out"},
        "worker_id": "worker-7f3a", "host": {"name": "node-12", "zone": "eu-west-1b", "cpu": 0.75},
        "retry_after_ms": 1500, "tags": ["slow", "ünïcödé"],
    }])
    add_valid("unknown_fields_in_attempt", "Unknown fields inside an attempt record (string, nested object, number, array) must be kept.", e)

    e = base_pending()
    e.update(attempt_count=1, attempts=[{
        "attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z", "finished_at": "2026-07-20T14:03:22.950Z",
        "outcome": "RETRYABLE_FAILURE",
        "error": {"type": "TimeoutError", "message": "timed out", "detail": None, "stack": None,
                  "code": 504, "cause": {"type": "OSError", "message": "errno 110", "errno": 110},
                  "notes": ["first", "zweite", "третий"], "retry_hint": None},
    }])
    add_valid("unknown_fields_in_error", "Unknown fields inside an error object (number, nested object, array, null) must be kept.", e)

    e = base_pending()
    e["headers"] = {"b-header": "2", "a-header": "1"}
    e["zz_last"] = 1
    e["a_first"] = {"y": [3, 2, 1], "x": {"\uff21": "fullwidth A", "\U0001F600": "emoji", "Z": "upper", "_": "underscore", "z": "lower"}}
    e["\u00e9clair"] = "key above ASCII"
    e["10"] = "ten"
    e["9"] = "nine"
    e["Zeta"] = "upper-case key"
    e["attempts"] = [{"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z", "finished_at": "2026-07-20T14:03:22.950Z",
                      "outcome": "RETRYABLE_FAILURE", "error": {"type": "E", "message": "m", "z": 1, "a": 2}, "zz": True, "aa": False}]
    e["attempt_count"] = 1
    add_valid("unknown_fields_canonical_order", "Canonical form with unknown fields at every level: known fields in their fixed order, then unknown fields sorted by key in Unicode code point order (U+FF21 before U+1F600, unlike UTF-16 order), nested objects sorted too. Must re-encode byte for byte.", e, canonical=True)

    e = base_pending()
    e["headers"] = {
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
        "rdq.source": "sqs://https://sqs.eu-west-1.amazonaws.com/123456789012/orders/7f1c0a52-1d4b-4c2e-9a55-3e0b5b2f9d10",
        "rdq.submitted_by": "checkout-service",
        "rdq.some_future_key": "system metadata this reader does not know",
    }
    add_valid("system_headers", "Stored envelopes may carry rdq.-prefixed system headers, including ones this reader does not know; they must decode and be kept.", e)

    e = base_pending()
    e["headers"] = {"x-büro": "Zürich", "x-emoji": "✅ 🚀", "x-cjk": "東京", "x-rtl": "שלום"}
    e["attempt_count"] = 1
    e["attempts"] = [{"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z", "finished_at": "2026-07-20T14:03:22.950Z",
                      "outcome": "RETRYABLE_FAILURE", "error": {"type": "app.ÉchecDeConnexion", "message": "connexion refusée — réessayer ⏳ 接続が拒否されました…[truncated]", "detail": None, "stack": None}}]
    add_valid("non_ascii_text", "Non-ASCII text in header keys and values, an error type and a message (accents, CJK, RTL, emoji, the truncation marker).", e)

    e = base_pending()
    e["headers"] = {"": "value of the empty key", "x-empty-value": ""}
    add_valid("headers_empty_key_and_value", "Headers are any string-to-string map: an empty key and an empty value are legal.", e)

    # Escapes: written by hand so the input uses escape sequences a canonical encoder would not.
    text = pretty_bytes(base_pending()).decode()
    text = text.replace('"headers": {\n', '"headers": {\n    "x-escapes": "quote \\" backslash \\\\ slash \\/ tab \\t nl \\n cr \\r bs \\b ff \\f nul \\u0000 us \\u001f del \\u007f e-acute \\u00e9 ls \\u2028 ps \\u2029 astral \\ud83d\\ude00",\n', 1)
    add_valid("string_escapes", "JSON string escapes in input: \\\" \\\\ \\/ \\t \\n \\r \\b \\f, \\u escapes for control characters, DEL, non-ASCII, U+2028/U+2029 and a surrogate pair. The decoded text must survive re-encoding.", text.encode())

    e = base_pending()
    e["headers"] = {"x-escapes": "quote \" backslash \\ slash / tab \t nl \n cr \r bs \b ff \f nul \u0000 us \u001f del \u007f e-acute \u00e9 ls \u2028 ps \u2029 astral \U0001F600"}
    add_valid("string_escapes_canonical", "Canonical string escaping: only \" and \\ and control characters U+0000..U+001F are escaped (\\b \\t \\n \\f \\r short forms, otherwise \\u00XX lower-case hex); '/', DEL, U+2028/U+2029 and all non-ASCII are written as raw UTF-8. Must re-encode byte for byte.", e, canonical=True)

    e = base_pending()
    for k in ("handler_version", "headers", "attempts"):
        del e[k]
    add_valid("optional_fields_absent", "handler_version, payload_ref, headers, priority, deferral_count and attempts all absent; re-encoding must not add them (or must add them only as null, which counts as equal, for nullable ones).", e)

    e = base_pending()
    for k in ("handler_version", "headers", "attempts"):
        del e[k]
    add_valid("optional_fields_absent_canonical", "Canonical form of an envelope whose optional fields (handler_version, payload_ref, headers, priority, deferral_count, attempts) are absent: absent fields stay absent, byte for byte.", e, canonical=True)

    e = base_pending()
    e["handler_version"] = None
    e["payload_ref"] = None
    add_valid("explicit_nulls", "handler_version and payload_ref explicitly null.", e)

    e = base_pending()
    e["headers"] = {}
    e["attempts"] = []
    e["priority"] = 0
    e["deferral_count"] = 0
    add_valid("explicit_empty_and_zero", "headers {} and attempts [] present but empty, priority and deferral_count explicitly 0; canonical, so they must be kept exactly (present, not dropped).", e, canonical=True)

    e = base_pending()
    e["priority"] = 255
    e["deferral_count"] = 3
    add_valid("priority_255_deferral_count", "The additive v1 fields priority (maximum u8, 255) and deferral_count given explicitly.", e)

    e = base_pending()
    e.update(priority=255, deferral_count=4294967295, attempt_count=4294967295, redrive_count=4294967295)
    add_valid("counts_maximum", "deferral_count, attempt_count and redrive_count at the u32 maximum 4294967295, priority at 255.", e)

    e = base_pending()
    e["payload_ref"] = None
    add_valid("payload_ref_null", "The reserved payload_ref present as null (v1 writers never populate it).", e)

    e = base_pending()
    e["payload"] = ""
    add_valid("empty_payload", "An empty payload: the empty string is the canonical base64 of zero bytes.", e)

    e = base_pending()
    e["payload"] = base64.b64encode(bytes([0xfb, 0xff, 0xbf, 0x00, 0x01])).decode()
    e["payload_content_type"] = "application/octet-stream"
    add_valid("binary_payload", "Binary payload whose base64 uses '+' and '/' and one '=' of padding; content type application/octet-stream.", e)

    e = base_pending()
    e["payload"] = base64.b64encode(bytes([8, 150, 1, 18, 7]) + "checkout".encode()).decode()
    e["payload_content_type"] = "application/x-protobuf; messageType=\"orders.v1.Charge\""
    add_valid("protobuf_content_type", "A payload_content_type other than JSON (protobuf with a parameter); rdq never parses the payload.", e)

    e = base_pending()
    e["payload"] = base64.b64encode("hello, wörld\n".encode()).decode()
    e["payload_content_type"] = "text/plain; charset=utf-8"
    add_valid("text_payload", "A text/plain payload with a charset parameter.", e)

    e = base_pending()
    e["queue"] = "q" * 236 + ".a-b"
    e["handler_ref"] = "h" * 238 + "_1"
    assert len(e["queue"]) == 240 and len(e["handler_ref"]) == 240
    add_valid("names_240_chars", "queue and handler_ref of exactly 240 characters, the maximum.", e)

    e = base_pending()
    e["queue"] = "abcdefghijklmnopqrstuvwxyz0123456789._-"
    e["handler_ref"] = "x"
    add_valid("names_full_charset_and_one_char", "A queue name using every allowed character [a-z0-9._-]; a one-character handler_ref.", e)

    e = base_pending()
    e["queue"] = "..."
    e["handler_ref"] = "-_-"
    add_valid("names_punctuation_only", "Names made only of the allowed punctuation: the rule is charset and length, nothing else.", e)

    e = base_pending()
    e["created_at"] = "0000-01-01T00:00:00.000Z"
    e["next_attempt_at"] = "0000-02-29T23:59:59.999Z"
    add_valid("timestamp_year_0000", "Timestamps in year 0000 (the earliest representable instant, and 0000-02-29: year 0 is a leap year).", e)

    e = base_pending()
    e["created_at"] = "9999-12-31T23:59:59.999Z"
    e["next_attempt_at"] = "9999-12-31T23:59:59.999Z"
    add_valid("timestamp_year_9999", "Timestamps at 9999-12-31T23:59:59.999Z, the latest representable instant.", e)

    e = base_pending()
    e["created_at"] = "2024-02-29T12:00:00.000Z"
    e["next_attempt_at"] = "2000-02-29T00:00:00.001Z"
    e["lease_expires_at"] = "1970-01-01T00:00:00.000Z"
    add_valid("timestamp_leap_days_and_epoch", "Leap days 2024-02-29 and 2000-02-29 (divisible by 400), and the Unix epoch.", e)

    e = base_pending()
    e["id"] = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"
    add_valid("ulid_maximum", "The largest ULID, 7ZZZZZZZZZZZZZZZZZZZZZZZZZ (first character 7 is the highest allowed).", e)

    e = base_pending()
    e["id"] = "00000000000000000000000000"
    add_valid("ulid_minimum", "The smallest ULID, all zeros.", e)

    e = base_pending()
    e["id"] = "0123456789ABCDEFGHJKMNPQRS"
    e["handler_version"] = "0123456789ABCDEFGHJKMNPQRS-TVWXYZ"
    add_valid("ulid_alphabet", "A ULID using the Crockford alphabet 0-9 A-H J K M N P-S (no I L O U).", e)

    e = base_pending()
    e["id"] = "01J3A4B5C6D7E8F9G0TVWXYZ00"
    add_valid("ulid_alphabet_tail", "A ULID using the rest of the Crockford alphabet (T V W X Y Z).", e)

    e = seed()
    obj = canon_env(e)
    rev = {k: obj[k] for k in reversed(list(obj))}
    text = json.dumps(rev, ensure_ascii=False, indent="\t")
    text = " \r\n" + text.replace(": ", " :  ") + "\n\n\t "
    add_valid("noncanonical_layout", "Keys in reverse order, tabs, CRLF and extra whitespace around the document and separators: layout is not significant on input.", text.encode())

    e = base_pending()
    e["next_attempt_at"] = None
    e["status"] = "SUCCEEDED"
    e["attempt_count"] = 2
    e["attempts"] = [
        {"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z", "finished_at": "2026-07-20T14:08:22.200Z", "outcome": "LEASE_EXPIRED",
         "error": {"type": "rdq.LeaseExpired", "message": "lease expired at 2026-07-20T14:08:22.200Z without a reported outcome"}},
        {"attempt_no": 2, "started_at": "2026-07-20T14:08:30.000Z", "finished_at": "2026-07-20T14:08:30.400Z", "outcome": "SUCCESS"},
    ]
    add_valid("lease_expired_then_success", "A lease-expired attempt followed by a successful one: mixed history, error present on one record and absent on the other.", e, canonical=True)

    e = base_pending()
    e["attempt_count"] = 1
    e["attempts"] = [{"attempt_no": 1, "started_at": "2026-07-20T14:03:22.200Z", "finished_at": "2026-07-20T14:03:22.950Z",
                      "outcome": "RETRYABLE_FAILURE", "error": {"type": "Error", "message": "", "detail": None, "stack": ""}}]
    add_valid("error_empty_message_and_stack", "An error whose message and stack are empty strings (only the type must be non-empty).", e)

    # Exactly 1 MiB canonical.
    big = base_pending()
    big["id"] = "01J3ZZZZZZZZZZZZZZZZZZZZZZ"
    big["payload_content_type"] = "application/octet-stream"
    big["headers"]["x-filler"] = ""

    def sized(target):
        env = copy.deepcopy(big)
        env["payload"] = ""
        overhead = len(canonical_bytes(env))
        room = target - overhead
        b64_len = room - room % 4
        nbytes = b64_len // 4 * 3
        env["payload"] = base64.b64encode(bytes((i * 37 + 11) % 256 for i in range(nbytes))).decode()
        env["headers"]["x-filler"] = "f" * (room % 4)
        data = canonical_bytes(env)
        assert len(data) == target, (len(data), target)
        return env, data

    _, data = sized(MIB)
    add_valid("size_exactly_1mib", "A canonical envelope of exactly 1048576 bytes: at the default 1 MiB limit, so it is accepted (the limit is inclusive). File size equals canonical size.", data, canonical=True)

    small = base_pending()
    small_len = len(canonical_bytes(small))
    add_valid("size_exactly_custom_limit", f"A canonical envelope of {small_len} bytes decoded with max_bytes equal to its size: accepted.", small, canonical=True, max_bytes=small_len)

    # ---------------------------------------------------------------- invalid
    M, U, F, Q, H, P = ("MALFORMED_ENVELOPE", "UNSUPPORTED_ENVELOPE_VERSION", "INVALID_FIELD",
                        "INVALID_QUEUE_NAME", "INVALID_HANDLER_REF", "PAYLOAD_TOO_LARGE")

    add_invalid("not_json", "Input that is not JSON at all.", "this is not json\n", M)
    add_invalid("empty_input", "Zero bytes of input.", b"", M)
    add_invalid("whitespace_only", "Only whitespace.", " \n\t\r\n", M)
    add_invalid("top_level_array", "An array holding a valid envelope: the top level must be an object.", [seed()], M)
    add_invalid("top_level_null", "The JSON value null.", "null\n", M)
    add_invalid("top_level_string", "A JSON string (e.g. a double-encoded envelope).", json.dumps(json.dumps(seed())) + "\n", M)
    add_invalid("trailing_garbage", "A valid envelope followed by garbage.", canonical_bytes(seed()) + b" x", M)
    add_invalid("trailing_second_document", "Two JSON documents back to back (JSONL without the newline handling): only one envelope per input.", canonical_bytes(seed()) + b"\n{}", M)
    add_invalid("truncated", "A valid envelope cut off in the middle.", canonical_bytes(seed())[:200], M)
    add_invalid("trailing_comma", "A trailing comma after the last member.", SEED_TEXT.rstrip()[:-1].rstrip() + ",\n}\n", M)
    add_invalid("single_quotes", "JavaScript-style single-quoted strings.", SEED_TEXT.replace('"queue": "payments.charge"', "'queue': 'payments.charge'"), M)
    add_invalid("invalid_utf8", "A string containing bytes that are not UTF-8.", SEED_TEXT.encode().replace(b"checkout-service", b"checkout-\xff\xfe-service"), M)
    add_invalid("lone_surrogate_escape", "A \\u escape of a lone UTF-16 surrogate, which is not a Unicode scalar value and cannot be UTF-8.", SEED_TEXT.replace("connect timed out after 500ms", "connect timed out \\ud800 after 500ms"), M)
    add_invalid("nan_literal", "A non-JSON NaN literal in an unknown field.", SEED_TEXT.replace('"status": "PENDING",', '"status": "PENDING",\n  "x_score": NaN,'), M)

    seed_lines = SEED_TEXT
    add_invalid("duplicate_key_top_level", "The key queue twice at top level, even with the same value.",
                seed_lines.replace('"queue": "payments.charge",', '"queue": "payments.charge",\n  "queue": "payments.charge",', 1), M)
    add_invalid("duplicate_key_top_level_escaped", "The key queue twice, once spelled with a \\u escape: keys are compared after unescaping.",
                seed_lines.replace('"queue": "payments.charge",', '"queue": "payments.charge",\n  "\\u0071ueue": "payments.refund",', 1), M)
    add_invalid("duplicate_key_in_headers", "A header key twice.",
                seed_lines.replace('"rdq.submitted_by": "checkout-service"', '"rdq.submitted_by": "checkout-service",\n    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02"', 1), M)
    add_invalid("duplicate_key_in_attempt", "The key outcome twice inside an attempt record.",
                seed_lines.replace('"outcome": "RETRYABLE_FAILURE",', '"outcome": "RETRYABLE_FAILURE",\n      "outcome": "SUCCESS",', 1), M)
    add_invalid("duplicate_key_in_error", "The key message twice inside an error object.",
                seed_lines.replace('"message": "connect timed out after 500ms",', '"message": "connect timed out after 500ms",\n        "message": "again",', 1), M)
    add_invalid("duplicate_key_in_unknown_nested", "A duplicate key deep inside an unknown field's nested object: duplicates are refused at every depth.",
                seed_lines.replace('"status": "PENDING",', '"status": "PENDING",\n  "x_meta": {"outer": [{"inner": {"k": 1, "k": 2}}]},', 1), M)
    add_invalid("duplicate_key_in_detail", "A duplicate key inside an error's detail object.",
                seed_lines.replace('"detail": null,', '"detail": {"code": 1, "code": 1},', 1), M)

    def mut(fn, base=None):
        e = copy.deepcopy(base) if base is not None else seed()
        fn(e)
        return e

    def setk(path, value):
        def f(e):
            obj = e
            for p in path[:-1]:
                obj = obj[p]
            obj[path[-1]] = value
        return f

    def delk(path):
        def f(e):
            obj = e
            for p in path[:-1]:
                obj = obj[p]
            del obj[path[-1]]
        return f

    # Versions.
    add_invalid("version_2", "envelope_version 2, newer than this (v1) reader.", mut(setk(["envelope_version"], 2)), U, "envelope_version")
    add_invalid("version_99", "envelope_version 99.", mut(setk(["envelope_version"], 99)), U, "envelope_version")
    add_invalid("version_2_other_shape", "envelope_version 2 with a body a v1 reader cannot read: the version is checked before anything else.",
                {"envelope_version": 2, "task": {"id": "whatever"}}, U, "envelope_version")
    add_invalid("version_0", "envelope_version 0 does not exist (the first version is 1).", mut(setk(["envelope_version"], 0)), F, "envelope_version")
    add_invalid("version_negative", "envelope_version -1: an integer breaking the rule.", mut(setk(["envelope_version"], -1)), F, "envelope_version")
    add_invalid("version_string", "envelope_version as the string \"1\": wrong JSON type.", mut(setk(["envelope_version"], "1")), M, "envelope_version")
    add_invalid("version_missing", "No envelope_version.", mut(delk(["envelope_version"])), M, "envelope_version")
    add_invalid("version_null", "envelope_version null.", mut(setk(["envelope_version"], None)), M, "envelope_version")

    # Required fields.
    for k in ("id", "queue", "handler_ref", "payload", "payload_content_type", "status", "created_at"):
        add_invalid(f"missing_{k}", f"The required field {k} is absent.", mut(delk([k])), M, k)
    add_invalid("null_id", "The required field id is null.", mut(setk(["id"], None)), M, "id")
    add_invalid("null_created_at", "The required field created_at is null.", mut(setk(["created_at"], None)), M, "created_at")
    add_invalid("empty_object", "An empty JSON object: every required field is missing (no path is pinned, since which missing field is reported first is not specified).", {}, M)

    # Wrong JSON types.
    add_invalid("id_number", "id as a number.", mut(setk(["id"], 12345)), M, "id")
    add_invalid("queue_number", "queue as a number.", mut(setk(["queue"], 7)), M, "queue")
    add_invalid("handler_version_number", "handler_version as a number.", mut(setk(["handler_version"], 3)), M, "handler_version")
    add_invalid("payload_number", "payload as a number.", mut(setk(["payload"], 42)), M, "payload")
    add_invalid("payload_array_of_bytes", "payload as an array of byte values instead of base64 text.", mut(setk(["payload"], [123, 125])), M, "payload")
    add_invalid("payload_ref_number", "payload_ref as a number.", mut(setk(["payload_ref"], 1)), M, "payload_ref")
    add_invalid("status_number", "status as a number.", mut(setk(["status"], 0)), M, "status")
    add_invalid("attempt_count_string", "attempt_count as the string \"2\".", mut(setk(["attempt_count"], "2")), M, "attempt_count")
    add_invalid("priority_string", "priority as a string.", mut(setk(["priority"], "high")), M, "priority")
    add_invalid("redrive_count_boolean", "redrive_count as a boolean.", mut(setk(["redrive_count"], False)), M, "redrive_count")
    add_invalid("created_at_number", "created_at as epoch milliseconds instead of text.", mut(setk(["created_at"], 1784556202117)), M, "created_at")
    add_invalid("lease_expires_at_number", "lease_expires_at as a number.", mut(setk(["lease_expires_at"], 0)), M, "lease_expires_at")

    # ULIDs.
    for name, val, desc in [
        ("id_too_short", "01J2ZK7Q8XW5H3N9G4T6B8RDQ", "25 characters"),
        ("id_too_long", "01J2ZK7Q8XW5H3N9G4T6B8RDQ00", "27 characters"),
        ("id_lowercase", "01j2zk7q8xw5h3n9g4t6b8rdq0", "lower-case (not canonical)"),
        ("id_letter_u", "01J2ZK7Q8XW5H3N9G4T6B8RDQU", "contains U, not in the Crockford alphabet"),
        ("id_letter_i", "01J2ZK7Q8XW5H3N9G4T6B8RDQI", "contains I, an alias Crockford decoders may accept but never canonical"),
        ("id_letter_o", "O1J2ZK7Q8XW5H3N9G4T6B8RDQ0", "contains O, an alias of 0, not canonical"),
        ("id_first_char_8", "81J2ZK7Q8XW5H3N9G4T6B8RDQ0", "first character 8: more than 128 bits"),
        ("id_uuid", "0190c3e4-5b7a-7c3d-9e2f-1a2b3c4d5e6f", "a UUID instead of a ULID"),
        ("id_empty", "", "the empty string"),
    ]:
        add_invalid(name, f"id is not a canonical ULID: {desc}.", mut(setk(["id"], val)), F, "id")

    # Names.
    for field, code in (("queue", Q), ("handler_ref", H)):
        for name, val, desc in [
            ("uppercase", "Payments.charge", "an upper-case letter"),
            ("space", "payments charge", "a space"),
            ("241_chars", "a" * 241, "241 characters, one over the limit"),
            ("empty", "", "empty"),
            ("non_ascii", "café", "a non-ASCII letter"),
            ("slash", "payments/charge", "a slash"),
        ]:
            add_invalid(f"{field}_{name}", f"{field} with {desc}.", mut(setk([field], val)), code, field)
    add_invalid("handler_ref_rust_path", "handler_ref that is a Rust type path (colons, capitals).", mut(setk(["handler_ref"], "myapp::jobs::SendEmail")), H, "handler_ref")

    # Status / outcome.
    add_invalid("status_unknown", "status RUNNING, not one of the four.", mut(setk(["status"], "RUNNING")), F, "status")
    add_invalid("status_lowercase", "status pending in lower case: spellings are exact.", mut(setk(["status"], "pending")), F, "status")
    add_invalid("outcome_unknown", "outcome TIMEOUT, not one of the four.", mut(setk(["attempts", 0, "outcome"], "TIMEOUT")), F, "attempts[0].outcome")
    add_invalid("outcome_lowercase", "outcome success in lower case.", mut(setk(["attempts", 0, "outcome"], "success")), F, "attempts[0].outcome")
    second = {"attempt_no": 2, "started_at": "2026-07-20T14:05:22.200Z", "finished_at": None, "outcome": "CANCELLED", "error": None}
    add_invalid("outcome_unknown_second_attempt", "An unknown outcome in the second attempt: the path carries the index.",
                mut(lambda e: e["attempts"].append(copy.deepcopy(second))), F, "attempts[1].outcome")
    add_invalid("outcome_number", "outcome as a number.", mut(setk(["attempts", 0, "outcome"], 1)), M, "attempts[0].outcome")

    # Integers.
    add_invalid("attempt_no_0", "attempt_no 0: attempts are numbered from 1.", mut(setk(["attempts", 0, "attempt_no"], 0)), F, "attempts[0].attempt_no")
    add_invalid("attempt_no_missing", "An attempt without attempt_no.", mut(delk(["attempts", 0, "attempt_no"])), M, "attempts[0].attempt_no")
    add_invalid("attempt_no_negative", "attempt_no -1.", mut(setk(["attempts", 0, "attempt_no"], -1)), F, "attempts[0].attempt_no")
    add_invalid("attempt_count_negative", "attempt_count -1.", mut(setk(["attempt_count"], -1)), F, "attempt_count")
    add_invalid("redrive_count_negative", "redrive_count -1.", mut(setk(["redrive_count"], -1)), F, "redrive_count")
    add_invalid("deferral_count_negative", "deferral_count -1.", mut(setk(["deferral_count"], -1)), F, "deferral_count")
    add_invalid("deferral_count_too_large", "deferral_count 4294967296, one over the u32 maximum.", mut(setk(["deferral_count"], 4294967296)), F, "deferral_count")
    add_invalid("attempt_count_too_large", "attempt_count 4294967296, one over the u32 maximum.", mut(setk(["attempt_count"], 4294967296)), F, "attempt_count")
    add_invalid("priority_256", "priority 256, one over the u8 maximum.", mut(setk(["priority"], 256)), F, "priority")
    add_invalid("priority_negative", "priority -1.", mut(setk(["priority"], -1)), F, "priority")

    # Headers.
    add_invalid("header_value_number", "A header whose value is a number.", mut(setk(["headers", "x-retries"], 3)), F, "headers.x-retries")
    add_invalid("header_value_object", "A header whose value is an object: headers are a flat map.", mut(setk(["headers", "x-ctx"], {"a": "b"})), F, "headers.x-ctx")
    add_invalid("header_value_null", "A header whose value is null.", mut(setk(["headers", "x-none"], None)), F, "headers.x-none")
    add_invalid("header_value_array", "A header whose value is an array.", mut(setk(["headers", "x-list"], ["a", "b"])), F, "headers.x-list")
    add_invalid("header_value_bool", "A header whose value is a boolean.", mut(setk(["headers", "x-flag"], True)), F, "headers.x-flag")
    add_invalid("headers_array", "headers as an array of pairs.", mut(setk(["headers"], [["traceparent", "00-ab-01"]])), M, "headers")
    add_invalid("headers_string", "headers as a string.", mut(setk(["headers"], "traceparent=00-ab-01")), M, "headers")

    # Timestamps.
    bad_ts = [
        ("no_millis", "2026-07-20T14:03:22Z", "no fractional seconds"),
        ("two_digit_millis", "2026-07-20T14:03:22.11Z", "two fractional digits"),
        ("offset", "2026-07-20T14:03:22.117+00:00", "a +00:00 offset instead of Z"),
        ("feb_30", "2026-02-30T00:00:00.000Z", "February 30"),
        ("hour_24", "2026-07-20T24:00:00.000Z", "hour 24"),
        ("lowercase_t", "2026-07-20t14:03:22.117Z", "a lower-case t"),
        ("date_only", "2026-07-20", "a date only"),
    ]
    for field, path in [(["created_at"], "created_at"), (["next_attempt_at"], "next_attempt_at"),
                        (["attempts", 0, "started_at"], "attempts[0].started_at"),
                        (["attempts", 0, "finished_at"], "attempts[0].finished_at")]:
        for tag, val, desc in bad_ts:
            nm = path.replace("[0].", "_").replace("attempts_", "attempt_") + "_" + tag
            add_invalid(nm, f"{path} with {desc}: {val}.", mut(setk(field, val)), F, path)
    for tag, val, desc in [
        ("four_digit_millis", "2026-07-20T14:03:22.1170Z", "four fractional digits"),
        ("lowercase_z", "2026-07-20T14:03:22.117z", "a lower-case z"),
        ("space_separator", "2026-07-20 14:03:22.117Z", "a space instead of T"),
        ("feb_29_non_leap", "2025-02-29T00:00:00.000Z", "February 29 of a non-leap year"),
        ("feb_29_1900", "1900-02-29T00:00:00.000Z", "February 29, 1900 (divisible by 100, not a leap year)"),
        ("month_13", "2026-13-01T00:00:00.000Z", "month 13"),
        ("minute_60", "2026-07-20T23:60:00.000Z", "minute 60"),
        ("five_digit_year", "12026-07-20T14:03:22.117Z", "a five-digit year"),
        ("signed_year", "+2026-07-20T14:03:22.117Z", "a sign before the year"),
        ("empty", "", "the empty string"),
    ]:
        add_invalid(f"lease_expires_at_{tag}", f"lease_expires_at with {desc}: {val!r}.", mut(setk(["lease_expires_at"], val)), F, "lease_expires_at")
    add_invalid("started_at_missing", "An attempt without started_at.", mut(delk(["attempts", 0, "started_at"])), M, "attempts[0].started_at")

    # Payload base64.
    for name, val, desc in [
        ("payload_missing_padding", "eyJvcmRlcl9pZCI6IDQyfQ", "base64 without its == padding"),
        ("payload_invalid_char", "eyJvcmRlcl9pZCI6!DQyfQ==", "a character outside the base64 alphabet"),
        ("payload_url_safe_alphabet", base64.urlsafe_b64encode(bytes([0xfb, 0xff, 0xbf])).decode(), "the URL-safe alphabet (- and _)"),
        ("payload_non_canonical_bits_one_pad", "QUJ=", "nonzero unused bits before one '=' (canonical is QUI=)"),
        ("payload_non_canonical_bits_two_pad", "QR==", "nonzero unused bits before '==' (canonical is QQ==)"),
        ("payload_embedded_newline", "eyJvcmRlcl9p\nZCI6IDQyfQ==", "a line break (MIME-style wrapping)"),
        ("payload_excess_padding", "QQ===", "three '=' characters"),
        ("payload_padding_only", "====", "nothing but padding"),
    ]:
        add_invalid(name, f"payload is not canonical standard base64: {desc}.", mut(setk(["payload"], val)), F, "payload")

    # Error objects and attempts.
    add_invalid("error_missing_type", "An error object without type.", mut(delk(["attempts", 0, "error", "type"])), M, "attempts[0].error.type")
    add_invalid("error_type_empty", "An error object whose type is the empty string.", mut(setk(["attempts", 0, "error", "type"], "")), F, "attempts[0].error.type")
    add_invalid("error_missing_message", "An error object without message.", mut(delk(["attempts", 0, "error", "message"])), M, "attempts[0].error.message")
    add_invalid("error_not_object", "error as a string instead of an object.", mut(setk(["attempts", 0, "error"], "connect timed out")), M, "attempts[0].error")
    add_invalid("error_stack_array", "An error stack as an array of frames instead of a string.", mut(setk(["attempts", 0, "error", "stack"], ["at a", "at b"])), M, "attempts[0].error.stack")
    add_invalid("attempts_not_array", "attempts as an object.", mut(setk(["attempts"], {"1": seed()["attempts"][0]})), M, "attempts")
    add_invalid("attempt_not_object", "An attempt that is a string.", mut(setk(["attempts", 0], "attempt 1 failed")), M, "attempts[0]")
    add_invalid("attempt_null", "A null entry in attempts.", mut(setk(["attempts"], [seed()["attempts"][0], None])), M, "attempts[1]")

    # Size.
    _, data = sized(MIB + 1)
    add_invalid("payload_too_large_default_limit", "A canonical envelope of 1048577 bytes, one over the default 1 MiB limit.", data, P)
    add_invalid("payload_too_large_custom_limit", f"A small valid envelope ({small_len} canonical bytes) decoded with max_bytes one less than its canonical size.",
                canonical_bytes(base_pending()), P, max_bytes=small_len - 1)

    manifest = {"format": 1, "cases": cases}
    with open(os.path.join(OUT, "manifest.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n")
    nv = sum(1 for c in cases if c["valid"])
    print(f"{len(cases)} cases: {nv} valid, {len(cases) - nv} invalid")


main()
