//! Cost of signing one delivery (docs/security.md, "Signed deliveries"): `Signer::sign` of a
//! 256-byte body with its attempt's fence, under one HMAC-SHA256 key, two (a rotation), and
//! one Ed25519 key. Compared in BENCHMARKS.md ("Signed deliveries") with the CPU a slot costs.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use jiff::Timestamp;
use sundial_target::signing::{NamespacedKey, Signer, SigningKey};

fn key(id: &str, text: &str) -> NamespacedKey {
    NamespacedKey {
        namespaces: vec!["*".into()],
        key: SigningKey::parse(id, text).expect("a valid key"),
    }
}

fn sign(c: &mut Criterion, name: &str, signer: &Signer) {
    let body = vec![b'x'; 256];
    let started = Timestamp::from_second(1_800_000_000).expect("in range");
    let lease = started + jiff::SignedDuration::from_secs(30);
    c.bench_function(name, |b| {
        b.iter(|| {
            signer.sign(
                black_box("bench"),
                black_box("0193a5c4-0000-7000-8000-000000000001"),
                started,
                black_box(&body),
                Some((1, lease)),
            )
        })
    });
}

fn signing(c: &mut Criterion) {
    let hmac = SigningKey::generate("hmac-sha256").expect("hmac");
    let hmac2 = SigningKey::generate("hmac-sha256").expect("hmac");
    let ed = SigningKey::generate("ed25519").expect("ed25519");
    sign(
        c,
        "sign: one HMAC-SHA256 key",
        &Signer::new(vec![key("a", &hmac)]),
    );
    sign(
        c,
        "sign: two HMAC-SHA256 keys (a rotation)",
        &Signer::new(vec![key("a", &hmac), key("b", &hmac2)]),
    );
    sign(
        c,
        "sign: one Ed25519 key",
        &Signer::new(vec![key("e", &ed)]),
    );
}

criterion_group!(benches, signing);
criterion_main!(benches);
