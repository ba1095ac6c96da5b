// Verifies Sundial's signed deliveries with the Standard Webhooks library from npm
// (`standardwebhooks`) and Ed25519 signatures with node:crypto, as a receiver would.
//
// Usage: node verify.mjs CASES.json [stale]; the cases are verify.py's. Prints one line per
// check and exits 1 at the first that does not hold.
import { readFileSync } from "node:fs";
import { createPublicKey, verify as edVerify } from "node:crypto";
import { Webhook } from "standardwebhooks";

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const stale = process.argv[3] === "stale";

function fail(message) {
  console.log(`FAIL ${message}`);
  process.exit(1);
}
const ok = (message) => console.log(`ok   ${message}`);

function refused(secret, body, headers) {
  try {
    new Webhook(secret).verify(body, headers);
  } catch (e) {
    return String(e.message || e);
  }
  return null;
}

// The fence of docs/security.md: an attempt older than one seen for the same id is refused,
// after both signatures verified.
class Receiver {
  constructor(secret) {
    this.secret = secret;
    this.seen = new Map();
  }
  accept(h, body) {
    // As docs/security.md shows it: the body, then the fence's text, each verified by the
    // library (jsonParse: false: neither need be JSON).
    const wh = new Webhook(this.secret);
    wh.verify(body, h, { jsonParse: false });
    const fence = {
      "webhook-id": h["webhook-id"],
      "webhook-timestamp": h["webhook-timestamp"],
      "webhook-signature": h["sundial-signature"],
    };
    wh.verify(`${h["sundial-attempt"]}.${h["sundial-lease-until"]}`, fence, { jsonParse: false });
    const attempt = Number(h["sundial-attempt"]);
    if (attempt < (this.seen.get(h["webhook-id"]) ?? 0)) throw new Error("stale attempt");
    this.seen.set(h["webhook-id"], attempt);
  }
}

const signed = cases.signed;
if (stale) {
  const real = Date.now;
  Date.now = () => real() + 6 * 60 * 1000;
  for (const d of signed) {
    const why = refused(cases.old, d.body, d.headers);
    if (!why || !/too old/i.test(why)) fail(`not refused as too old six minutes later: ${why}`);
  }
  ok("stale timestamps refused");
  process.exit(0);
}
if (signed.length < 2) fail(`expected two attempts, got ${signed.length}`);
// An Ed25519 public key as SubjectPublicKeyInfo DER: the fixed prefix, then the 32 bytes.
const spki = Buffer.concat([
  Buffer.from("302a300506032b6570032100", "hex"),
  Buffer.from(cases.public_key.slice(5), "base64"),
]);
const publicKey = createPublicKey({ key: spki, format: "der", type: "spki" });
for (const { headers: h, body } of signed) {
  for (const name of ["old", "new"]) {
    const why = refused(cases[name], body, h);
    if (why) fail(`attempt ${h["sundial-attempt"]} does not verify with the ${name} key: ${why}`);
  }
  if (!refused(cases.other, body, h)) fail("verified with a key never configured");
  if (!refused(cases.old, body + " ", h)) fail("a tampered body verified");
  if (!refused(cases.old, body, { ...h, "webhook-id": h["webhook-id"] + "x" }))
    fail("a changed webhook-id verified");
  const v1a = h["webhook-signature"].split(" ").filter((s) => s.startsWith("v1a,"));
  if (v1a.length !== 1) fail(`expected one v1a signature: ${h["webhook-signature"]}`);
  const message = Buffer.from(`${h["webhook-id"]}.${h["webhook-timestamp"]}.${body}`);
  const signature = Buffer.from(v1a[0].slice(4), "base64");
  if (!edVerify(null, message, publicKey, signature))
    fail("the Ed25519 signature does not verify with the served public key");
  if (edVerify(null, Buffer.concat([message, Buffer.from(" ")]), publicKey, signature))
    fail("a tampered body verified with Ed25519");
}
ok("every attempt verifies with the old and the new key (rotation) and with Ed25519");
ok("an unknown key, a tampered body and a changed id are refused");
const [first, second] = [...signed].sort(
  (a, b) => Number(a.headers["sundial-attempt"]) - Number(b.headers["sundial-attempt"]),
);
const receiver = new Receiver(cases.new);
receiver.accept(first.headers, first.body);
receiver.accept(second.headers, second.body);
try {
  receiver.accept(first.headers, first.body);
  fail("attempt 1 accepted after attempt 2 was seen");
} catch (e) {
  if (!/stale attempt/.test(e.message)) fail(`attempt 1 refused for another reason: ${e.message}`);
}
try {
  receiver.accept({ ...first.headers, "sundial-attempt": "3" }, first.body);
  fail("an attempt number changed in transit verified");
} catch (e) {
  if (/stale attempt/.test(e.message)) fail("a forged attempt number passed the signature check");
}
ok("a stale attempt and a forged attempt number are refused");
for (const name of ["webhook-id", "webhook-signature", "webhook-timestamp", "sundial-signature"])
  if (name in cases.unsigned.headers) fail(`a namespace without keys carries ${name}`);
ok("a namespace without keys is not signed");
for (const name of ["old", "new"]) {
  const why = refused(cases[name], cases.alert.body, cases.alert.headers);
  if (why) fail(`the alert does not verify with the ${name} key: ${why}`);
}
if (!refused(cases.old, cases.alert.body + " ", cases.alert.headers)) fail("a tampered alert verified");
ok("the alert verifies, and a tampered one is refused");
