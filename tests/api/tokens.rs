//! Buyer tokens for the identity tests: keys of our own (RSA from openssl, ECDSA and Ed25519
//! from ring), the tokens they sign, a JWKS server of the test's own on 127.0.0.1 (swappable,
//! counting its fetches), and signing in at a `demo` server.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{self, KeyPair};
use serde_json::{json, Value};

use crate::helpers::*;

/// A signing key and its public half as a JWK.
pub struct TestKey {
    pub kid: String,
    pub alg: Algorithm,
    encoding: EncodingKey,
    pub jwk: Value,
    /// RSA only: the public key as PEM, what the key-confusion attack signs HS256 with.
    pub public_pem: Option<Vec<u8>>,
}

impl TestKey {
    /// A fresh 2048-bit RSA key (RS256), made by openssl (as an issuer would).
    pub fn rsa(kid: &str) -> TestKey {
        let dir = scratch();
        let pem = dir.join("key.pem");
        let der = dir.join("key.der");
        openssl(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            path(&pem),
        ]);
        openssl(&[
            "rsa",
            "-in",
            path(&pem),
            "-outform",
            "DER",
            "-traditional",
            "-out",
            path(&der),
        ]);
        let modulus = openssl(&["rsa", "-in", path(&pem), "-noout", "-modulus"]);
        let public_pem = openssl(&["rsa", "-in", path(&pem), "-pubout"]);
        let hex = modulus.trim().trim_start_matches("Modulus=");
        let n: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let key = TestKey {
            kid: kid.into(),
            alg: Algorithm::RS256,
            encoding: EncodingKey::from_rsa_der(&std::fs::read(&der).unwrap()),
            jwk: json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                        "n": URL_SAFE_NO_PAD.encode(n), "e": "AQAB"}),
            public_pem: Some(public_pem.into_bytes()),
        };
        let _ = std::fs::remove_dir_all(dir);
        key
    }

    /// A fresh P-256 key (ES256).
    pub fn es256(kid: &str) -> TestKey {
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = signature::EcdsaKeyPair::generate_pkcs8(alg, &SystemRandom::new()).unwrap();
        let pair =
            signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &SystemRandom::new()).unwrap();
        // Uncompressed point: 0x04, x, y.
        let point = pair.public_key().as_ref();
        TestKey {
            kid: kid.into(),
            alg: Algorithm::ES256,
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
                        "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                        "y": URL_SAFE_NO_PAD.encode(&point[33..65])}),
            public_pem: None,
        }
    }

    /// A fresh Ed25519 key (EdDSA).
    pub fn ed25519(kid: &str) -> TestKey {
        let pkcs8 = signature::Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let pair = signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        TestKey {
            kid: kid.into(),
            alg: Algorithm::EdDSA,
            encoding: EncodingKey::from_ed_der(pkcs8.as_ref()),
            jwk: json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "use": "sig",
                        "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref())}),
            public_pem: None,
        }
    }

    /// A token of these claims, signed with this key and naming it.
    pub fn sign(&self, claims: &Value) -> String {
        self.sign_as(&self.kid, claims)
    }

    /// The same, naming another `kid`.
    pub fn sign_as(&self, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
    }
}

/// Claims a token of the test issuer carries, for `sub`, valid for an hour from now.
pub fn claims(sub: &str) -> Value {
    let now = now();
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now, "exp": now + 3600})
}

pub const ISSUER: &str = "https://issuer.test";
pub const AUDIENCE: &str = "seckill-test";

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A JWKS served over HTTP on 127.0.0.1, as an issuer publishes it.
pub struct JwksServer {
    pub url: String,
    keys: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    pub async fn start(keys: &[&TestKey]) -> JwksServer {
        let published = Arc::new(Mutex::new(jwks(keys)));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (served, counted) = (published.clone(), fetches.clone());
        let app = axum::Router::new().route(
            "/keys",
            axum::routing::get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                let body = served.lock().unwrap().clone();
                async move { axum::Json(body) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/keys", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        JwksServer {
            url,
            keys: published,
            fetches,
        }
    }

    /// Publishes these keys instead (a rotation).
    pub fn publish(&self, keys: &[&TestKey]) {
        *self.keys.lock().unwrap() = jwks(keys);
    }

    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

fn jwks(keys: &[&TestKey]) -> Value {
    json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()})
}

/// A token for `name` from a `demo` server.
pub async fn sign_in(base: &str, name: &str) -> String {
    let reply = send(
        http()
            .post(format!("{base}/api/session"))
            .json(&json!({ "name": name })),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, reqwest::StatusCode::CREATED, "{reply:?}");
    assert_eq!(reply.body["buyer"], name);
    reply.body["token"].as_str().unwrap().to_string()
}

/// One unit of `product` for the bearer of `token` (the body names no buyer).
pub async fn buy_with(base: &str, token: &str, body: Value) -> Reply {
    send(
        http()
            .post(format!("{base}/orders"))
            .bearer_auth(token)
            .json(&body),
    )
    .await
    .unwrap()
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("seckill-keys-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

fn openssl(args: &[&str]) -> String {
    let out = std::process::Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl (scripts/test installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
