"""Verifies Sundial's signed deliveries with the Standard Webhooks library from PyPI
(`standardwebhooks`) and Ed25519 signatures with `cryptography`, as a receiver would.

Usage: python3 verify.py CASES.json [stale]

CASES.json (written by crates/bin/tests/signing.rs) holds the HMAC secrets (`old`, `new`,
`other`, never configured), the Ed25519 public key served by the API, and the deliveries the
test's receiver got: `signed` (attempts 1 and 2 of one execution, in the order received),
`unsigned` (a namespace without keys) and `alert` (an alert of the signed namespace). Prints one line per check and exits 1 at the first that does not hold.
With `stale`, the clock reads six minutes later and every delivery must be refused as too old.
"""

import base64
import json
import sys
from datetime import datetime, timedelta, timezone

import standardwebhooks.webhooks as sw
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


def fail(message):
    print(f"FAIL {message}")
    sys.exit(1)


def ok(message):
    print(f"ok   {message}")


def refused(secret, body, headers):
    try:
        Webhook(secret).verify(body, headers)
    except WebhookVerificationError as e:
        return str(e)
    return None


class Receiver:
    """A receiver that refuses an attempt older than one it has seen for the same id: the fence
    of docs/security.md, over headers whose signature was checked first."""

    def __init__(self, secret):
        self.secret = secret
        self.seen = {}

    def accept(self, headers, body):
        # As docs/security.md shows it: the body, then the fence's text, each verified by
        # the library (json_parse=False: neither need be JSON).
        wh = Webhook(self.secret)
        wh.verify(body, headers, json_parse=False)
        fence = {
            "webhook-id": headers["webhook-id"],
            "webhook-timestamp": headers["webhook-timestamp"],
            "webhook-signature": headers["sundial-signature"],
        }
        wh.verify(
            f'{headers["sundial-attempt"]}.{headers["sundial-lease-until"]}',
            fence,
            json_parse=False,
        )
        attempt = int(headers["sundial-attempt"])
        if attempt < self.seen.get(headers["webhook-id"], 0):
            raise WebhookVerificationError("stale attempt")
        self.seen[headers["webhook-id"]] = attempt


def main():
    cases = json.load(open(sys.argv[1]))
    stale = len(sys.argv) > 2 and sys.argv[2] == "stale"
    signed = cases["signed"]
    if stale:

        class Later(datetime):
            @classmethod
            def now(cls, tz=None):
                return datetime.now(tz) + timedelta(minutes=6)

        sw.datetime = Later
        for d in signed:
            why = refused(cases["old"], d["body"], d["headers"])
            if why is None or "too old" not in why.lower():
                fail(f"a delivery verified six minutes later was not refused as too old: {why}")
        ok("stale timestamps refused")
        return
    if len(signed) < 2:
        fail(f"expected two attempts, got {len(signed)}")
    for d in signed:
        h, body = d["headers"], d["body"]
        for name in ("old", "new"):
            why = refused(cases[name], body, h)
            if why:
                fail(f"attempt {h.get('sundial-attempt')} does not verify with the {name} key: {why}")
        if not refused(cases["other"], body, h):
            fail("a delivery verified with a key that was never configured")
        if not refused(cases["old"], body + " ", h):
            fail("a tampered body verified")
        forged = dict(h, **{"webhook-id": h["webhook-id"] + "x"})
        if not refused(cases["old"], body, forged):
            fail("a changed webhook-id verified")
        # Ed25519: the v1a signature, checked with the public key the API serves.
        public = Ed25519PublicKey.from_public_bytes(base64.b64decode(cases["public_key"][5:]))
        message = f'{h["webhook-id"]}.{h["webhook-timestamp"]}.{body}'.encode()
        v1a = [s[4:] for s in h["webhook-signature"].split(" ") if s.startswith("v1a,")]
        if len(v1a) != 1:
            fail(f"expected one v1a signature: {h['webhook-signature']}")
        try:
            public.verify(base64.b64decode(v1a[0]), message)
        except InvalidSignature:
            fail("the Ed25519 signature does not verify with the served public key")
        try:
            public.verify(base64.b64decode(v1a[0]), message + b" ")
            fail("a tampered body verified with Ed25519")
        except InvalidSignature:
            pass
        lease_until = datetime.fromisoformat(h["sundial-lease-until"].replace("Z", "+00:00"))
        started = datetime.fromtimestamp(int(h["webhook-timestamp"]), tz=timezone.utc)
        if lease_until <= started:
            fail(f"lease end {lease_until} not after the attempt's start {started}")
    ok("every attempt verifies with the old and the new key (rotation) and with Ed25519")
    ok("an unknown key, a tampered body and a changed id are refused")
    first, second = sorted(signed, key=lambda d: int(d["headers"]["sundial-attempt"]))[:2]
    receiver = Receiver(cases["new"])
    receiver.accept(first["headers"], first["body"])
    receiver.accept(second["headers"], second["body"])
    try:
        receiver.accept(first["headers"], first["body"])
        fail("attempt 1 accepted after attempt 2 was seen")
    except WebhookVerificationError as e:
        if "stale attempt" not in str(e):
            fail(f"attempt 1 refused for another reason: {e}")
    forged = dict(first["headers"], **{"sundial-attempt": "3"})
    try:
        receiver.accept(forged, first["body"])
        fail("an attempt number changed in transit verified")
    except WebhookVerificationError:
        pass
    ok("a stale attempt and a forged attempt number are refused")
    for name in ("webhook-id", "webhook-signature", "webhook-timestamp", "sundial-signature"):
        if name in cases["unsigned"]["headers"]:
            fail(f"a delivery of a namespace without keys carries {name}")
    ok("a namespace without keys is not signed")
    alert = cases["alert"]
    for name in ("old", "new"):
        why = refused(cases[name], alert["body"], alert["headers"])
        if why:
            fail(f"the alert does not verify with the {name} key: {why}")
    if not refused(cases["old"], alert["body"] + " ", alert["headers"]):
        fail("a tampered alert verified")
    ok("the alert verifies, and a tampered one is refused")


if __name__ == "__main__":
    main()
