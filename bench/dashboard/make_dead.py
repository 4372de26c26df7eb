#!/usr/bin/env python3
"""Writes N DEAD envelopes of one queue as JSONL (what `rdq dlq import`
reads), copied from a template envelope exported from a real DLQ: new
time-ordered ids, and the latest error's type spread over a few kinds.

    make_dead.py TEMPLATE.jsonl N > dead.jsonl
"""
import json
import os
import sys
import time

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# How the dead tasks died: most of one kind, a long tail of others.
KINDS = [("http.Status503", 50), ("card.Declined", 25), ("http.Timeout", 15),
         ("db.Deadlock", 7), ("pdf.RenderError", 3)]


def ulid(ms: int, rand: int) -> str:
    value = (ms << 80) | rand
    return "".join(CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(26)))


def main() -> None:
    template = json.loads(open(sys.argv[1]).readline())
    n = int(sys.argv[2])
    weights = [k for k, w in KINDS for _ in range(w)]
    start = int(time.time() * 1000) - n  # one task per millisecond, up to now
    seed = int.from_bytes(os.urandom(8), "big")
    out = sys.stdout
    for i in range(n):
        env = dict(template)
        env["id"] = ulid(start + i, (seed << 16 | i) & ((1 << 80) - 1))
        kind = weights[i % len(weights)]
        attempts = [dict(a) for a in template["attempts"]]
        attempts[-1]["error"] = {"type": kind, "message": f"{kind} (task {i})"}
        env["attempts"] = attempts
        out.write(json.dumps(env, separators=(",", ":")))
        out.write("\n")


if __name__ == "__main__":
    main()
