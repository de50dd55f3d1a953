//! What checking a buyer's token costs the first time an instance sees it, per algorithm an
//! issuer may sign with (`docs/buyers.md`, "What it costs"): the same `jsonwebtoken` and
//! `ring` calls the server makes. A token seen before costs a lookup instead (the cache): the
//! bench's rows measure that (`loadtest/bench --saturation-only --rows=1 --auth-compare`).
//!
//!   cargo run --release --example token_bench [-- <verifications per algorithm>]
//!
//! Prints `<alg> <µs per verification>`, a line each. RSA's key comes from `openssl`.

use std::time::Instant;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use ring::signature::{self, KeyPair};

fn main() -> anyhow::Result<()> {
    let rounds: u32 = std::env::args().nth(1).map_or(Ok(3000), |n| n.parse())?;
    let rng = ring::rand::SystemRandom::new();
    let ed = signature::Ed25519KeyPair::generate_pkcs8(&rng)?;
    let ed_public = signature::Ed25519KeyPair::from_pkcs8(ed.as_ref())?;
    let p256 = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let ec = signature::EcdsaKeyPair::generate_pkcs8(p256, &rng)?;
    let ec_public = signature::EcdsaKeyPair::from_pkcs8(p256, ec.as_ref(), &rng)?;
    let (rsa_private, rsa_public) = rsa_key()?;
    let keys = [
        (
            Algorithm::EdDSA,
            EncodingKey::from_ed_der(ed.as_ref()),
            DecodingKey::from_ed_der(ed_public.public_key().as_ref()),
        ),
        (
            Algorithm::ES256,
            EncodingKey::from_ec_der(ec.as_ref()),
            DecodingKey::from_ec_der(ec_public.public_key().as_ref()),
        ),
        (
            Algorithm::RS256,
            EncodingKey::from_rsa_der(&rsa_private),
            DecodingKey::from_rsa_der(&rsa_public),
        ),
    ];
    for (alg, encoding, decoding) in keys {
        let exp = jsonwebtoken::get_current_timestamp() + 3600;
        let claims = serde_json::json!({
            "iss": "https://issuer.example", "aud": "seckill", "sub": "a-buyer-of-the-sale",
            "exp": exp,
        });
        let mut header = Header::new(alg);
        header.kid = Some("key-2026".into());
        let token = jsonwebtoken::encode(&header, &claims, &encoding)?;
        let mut validation = Validation::new(alg);
        validation.set_issuer(&["https://issuer.example"]);
        validation.set_audience(&["seckill"]);
        let started = Instant::now();
        for _ in 0..rounds {
            jsonwebtoken::decode_header(&token)?;
            jsonwebtoken::decode::<serde_json::Value>(&token, &decoding, &validation)?;
        }
        let micros = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
        println!("{alg:?} {micros:.1}");
    }
    Ok(())
}

/// A fresh 2048-bit RSA key: its private half (PKCS#1 DER) and public half (PKCS#1 DER).
fn rsa_key() -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let dir = std::env::temp_dir().join(format!("token-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let openssl = |args: &[&str]| -> anyhow::Result<()> {
        let out = std::process::Command::new("openssl").args(args).output()?;
        anyhow::ensure!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    let pem = path("key.pem");
    openssl(&[
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        &pem,
    ])?;
    openssl(&[
        "rsa",
        "-in",
        &pem,
        "-outform",
        "DER",
        "-traditional",
        "-out",
        &path("private.der"),
    ])?;
    openssl(&[
        "rsa",
        "-in",
        &pem,
        "-RSAPublicKey_out",
        "-outform",
        "DER",
        "-out",
        &path("public.der"),
    ])?;
    let keys = (
        std::fs::read(path("private.der"))?,
        std::fs::read(path("public.der"))?,
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(keys)
}
