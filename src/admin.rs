//! `seckill admin …`: the admin's HTTP API from the command line, against a running
//! instance (or nginx in front of several), so nobody hand-writes curl with a bearer header.
//!
//! A client like any other: it speaks only the public API, so what it can do is what the
//! admin token can do over HTTP, and an instance's checks (bad input: 400/422 with a problem
//! code) answer it as they answer curl. The token comes from `SECKILL_ADMIN_TOKEN` or a file
//! (`SECKILL_ADMIN_TOKEN_FILE`, or `--token-file`), not the command line, where `ps` shows it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use serde_json::Value;

#[derive(Parser)]
#[command(
    name = "seckill admin",
    bin_name = "seckill admin",
    about = "Admin actions against a running seckill instance (the admin token from SECKILL_ADMIN_TOKEN or a file)",
    after_help = "Answers are printed as JSON on stdout; a refusal prints its problem (status, code, detail) on stderr and exits 1."
)]
pub struct Admin {
    /// The instance, or nginx in front of the instances.
    #[arg(long, env = "SECKILL_URL", default_value = "http://127.0.0.1:8080")]
    url: reqwest::Url,
    /// The admin token. Never printed; `ps` shows a flag's value, so prefer the variable or
    /// --token-file.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A file holding the admin token (one trailing newline ignored); also
    /// SECKILL_ADMIN_TOKEN_FILE.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN_FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// Seconds to wait for each answer.
    #[arg(long, default_value_t = 30)]
    timeout_s: u64,
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Puts a new product on sale (POST /api/products).
    CreateProduct(NewProduct),
    /// Lists the products (GET /api/products).
    Products,
    /// Changes a product's terms; options left out stay as they are (PUT /api/products/{id}/terms).
    Terms {
        /// The product's id.
        id: i64,
        /// The new price, in cents.
        #[arg(long)]
        price_cents: Option<i64>,
        #[command(flatten)]
        terms: SaleTerms,
    },
    /// Puts more units on sale (POST /api/products/{id}/restock).
    Restock {
        /// The product's id.
        id: i64,
        /// Units to add.
        #[arg(long)]
        quantity: i64,
    },
    /// Stops the sale: orders are refused `paused` until resumed (POST /api/products/{id}/pause).
    Pause {
        /// The product's id.
        id: i64,
    },
    /// Resumes a paused sale (POST /api/products/{id}/resume).
    Resume {
        /// The product's id.
        id: i64,
    },
    /// Reads a product's books: stock, units sold, whether they balance (GET /api/products/{id}/audit).
    Audit {
        /// The product's id.
        id: i64,
    },
    /// Lists a buyer's most recent orders, newest first (GET /orders?user_id=…).
    Orders {
        /// The buyer.
        #[arg(long)]
        user: String,
        /// How many (1 to 100).
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// The page after this one: the previous answer's `next_cursor`.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Reads one order (GET /orders/{id}).
    Order {
        /// The order's id (a UUID).
        id: uuid::Uuid,
    },
    /// What the payment provider's ledger says of an order's charge (GET /api/orders/{id}/charge).
    Charge {
        /// The order's id (a UUID).
        id: uuid::Uuid,
    },
}

/// `POST /api/products`'s body.
#[derive(Args, Serialize)]
struct NewProduct {
    /// What buyers see.
    #[arg(long)]
    name: String,
    /// The price, in cents.
    #[arg(long)]
    price_cents: i64,
    /// Units on sale.
    #[arg(long)]
    stock: i64,
    /// zk (one fair ZooKeeper lock per product), or another guard the instance allows.
    #[arg(long, default_value = "zk")]
    guard: String,
    #[command(flatten)]
    #[serde(flatten)]
    terms: SaleTerms,
    /// Orders per lock cycle at most (the instance's --batch-max if left out).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_max: Option<i64>,
    /// Whether buyers come in through the product's line (a waiting room before the
    /// opening): true or false (left out: a line when --opens-at is given).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<bool>,
}

/// The terms a product is sold under beside its price; each left out is the instance's
/// default (a new product) or left as it is (a change).
#[derive(Args, Serialize)]
struct SaleTerms {
    /// Units one order may buy.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_per_order: Option<i64>,
    /// Units one buyer may hold across orders.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    per_user_limit: Option<i64>,
    /// Seconds a reservation waits for its payment.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    reservation_ttl_s: Option<i64>,
    /// When the sale opens (RFC 3339, e.g. 2026-11-11T00:00:00Z).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    opens_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When the sale closes (RFC 3339), after --opens-at.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    closes_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Runs `seckill admin <args>` (`args` starts with `admin`); the exit code says whether the
/// instance did it.
pub async fn main(args: Vec<std::ffi::OsString>) -> anyhow::Result<ExitCode> {
    let admin = Admin::parse_from(args);
    let token = match (&admin.token, &admin.token_file) {
        (Some(token), _) => token.clone(),
        (None, Some(file)) => {
            crate::config::read_secret(file).map_err(|e| anyhow::anyhow!("the admin token: {e}"))?
        }
        (None, None) => anyhow::bail!(
            "no admin token: set SECKILL_ADMIN_TOKEN, SECKILL_ADMIN_TOKEN_FILE or --token-file"
        ),
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(admin.timeout_s))
        .build()?;
    let url = |path: &str| admin.url.join(path).context("the instance's URL");
    let request = match &admin.action {
        Action::CreateProduct(new) => client.post(url("/api/products")?).json(new),
        Action::Products => client.get(url("/api/products")?),
        Action::Terms {
            id,
            price_cents,
            terms,
        } => {
            let mut change = serde_json::to_value(terms)?;
            if let Some(price) = price_cents {
                change["price_cents"] = (*price).into();
            }
            client
                .put(url(&format!("/api/products/{id}/terms"))?)
                .json(&change)
        }
        Action::Restock { id, quantity } => client
            .post(url(&format!("/api/products/{id}/restock"))?)
            .json(&serde_json::json!({ "quantity": quantity })),
        Action::Pause { id } => client.post(url(&format!("/api/products/{id}/pause"))?),
        Action::Resume { id } => client.post(url(&format!("/api/products/{id}/resume"))?),
        Action::Audit { id } => client.get(url(&format!("/api/products/{id}/audit"))?),
        Action::Orders {
            user,
            limit,
            cursor,
        } => {
            let mut query = vec![("user_id", user.clone()), ("limit", limit.to_string())];
            query.extend(cursor.iter().map(|c| ("cursor", c.clone())));
            client.get(url("/orders")?).query(&query)
        }
        Action::Order { id } => client.get(url(&format!("/orders/{id}"))?),
        Action::Charge { id } => client.get(url(&format!("/api/orders/{id}/charge"))?),
    };
    let response = request
        .bearer_auth(token)
        .send()
        .await
        .with_context(|| format!("no answer from {}", admin.url))?;
    let status = response.status();
    let text = response.text().await.context("reading the answer")?;
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    if status.is_success() {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(ExitCode::SUCCESS);
    }
    let field = |name: &str| body.get(name).and_then(Value::as_str).unwrap_or("");
    eprintln!(
        "refused: {status} {}: {}",
        field("error"),
        [field("title"), field("detail")]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(": ")
    );
    Ok(ExitCode::FAILURE)
}
