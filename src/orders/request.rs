//! A buyer's order as it arrives ([`NewOrder`], the JSON body) and as the domain takes it
//! ([`OrderRequest`]): parsed once, at the edge, so nothing further down checks it again.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Error;
use crate::inventory::Terms;

/// The longest pass a body may carry (the schema's `maxLength`).
const MAX_PASS: usize = 512;

/// A buyer's request, as the JSON body says it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewOrder {
    #[serde(deserialize_with = "crate::integer::whole")]
    pub product_id: i64,
    /// Who buys: 1 to 64 characters, not only white space, no control characters. With a
    /// buyer token (`--buyer-auth jwks` or `demo`) the buyer is the token's: omit it, or
    /// repeat it (another answers 403 `not_your_account`). Required in `open` mode and
    /// for the admin.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F-\x9F]*[^\s\x00-\x1F\x7F-\x9F][^\x00-\x1F\x7F-\x9F]*$"
    )]
    pub user_id: Option<String>,
    /// Units, at least 1 and at most the product's `max_per_order`.
    #[serde(default = "one", deserialize_with = "crate::integer::whole")]
    pub quantity: i64,
    /// `false` stops after the reservation; pay later with `POST /orders/{id}/pay`.
    #[serde(default = "yes")]
    pub pay: bool,
    /// The pass the product's line gave this buyer (`GET /api/products/{id}/line/me`):
    /// required by a product with a line (`line: true`), ignored by one without.
    #[schema(max_length = 512)]
    pub pass: Option<String>,
}

fn one() -> i64 {
    1
}

fn yes() -> bool {
    true
}

/// An order of the product a path names (`POST /api/products/{id}/orders`): a [`NewOrder`]
/// without `product_id`, so that a load balancer can send each product's orders to one
/// instance by the path alone.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProductOrder {
    /// As in [`NewOrder`].
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F-\x9F]*[^\s\x00-\x1F\x7F-\x9F][^\x00-\x1F\x7F-\x9F]*$"
    )]
    pub user_id: Option<String>,
    /// As in [`NewOrder`].
    #[serde(default = "one", deserialize_with = "crate::integer::whole")]
    pub quantity: i64,
    /// As in [`NewOrder`].
    #[serde(default = "yes")]
    pub pay: bool,
    /// As in [`NewOrder`].
    #[schema(max_length = 512)]
    pub pass: Option<String>,
}

impl ProductOrder {
    /// The order, of product `product_id`.
    pub fn of(self, product_id: i64) -> NewOrder {
        NewOrder {
            product_id,
            user_id: self.user_id,
            quantity: self.quantity,
            pay: self.pay,
            pass: self.pass,
        }
    }
}

/// An order that passed the checks that need no database: who buys, and a positive
/// quantity. Only [`NewOrder::parse`] makes one. Serialised (defaults filled in) as the
/// Idempotency-Key's fingerprint.
#[derive(Clone, Debug, Serialize)]
pub struct OrderRequest {
    product_id: i64,
    user_id: String,
    quantity: i64,
    pay: bool,
    /// Not part of the fingerprint: a retry with the pass its line gives again is the same
    /// order.
    #[serde(skip)]
    pass: Option<String>,
}

impl NewOrder {
    /// The order of `buyer` (the caller's, as the edge resolved it from the token or the
    /// body).
    pub fn parse(self, buyer: String) -> Result<OrderRequest, Error> {
        crate::buyers::Buyer::named(&buyer)
            .map_err(|why| Error::invalid(format!("user_id {why}")))?;
        if self.quantity < 1 {
            return Err(Error::invalid("quantity must be at least 1"));
        }
        // Checked here, whatever the product: one without a line ignores its pass, but a
        // request the schema calls malformed is malformed everywhere.
        if self
            .pass
            .as_ref()
            .is_some_and(|pass| pass.chars().count() > MAX_PASS)
        {
            return Err(Error::invalid(format!(
                "pass must be at most {MAX_PASS} characters"
            )));
        }
        Ok(OrderRequest {
            product_id: self.product_id,
            user_id: buyer,
            quantity: self.quantity,
            pay: self.pay,
            pass: self.pass,
        })
    }
}

impl OrderRequest {
    pub fn product_id(&self) -> i64 {
        self.product_id
    }

    pub fn user_id(&self) -> &str {
        &self.user_id
    }

    pub fn pay(&self) -> bool {
        self.pay
    }

    pub fn pass(&self) -> Option<&str> {
        self.pass.as_deref()
    }

    /// The quantity, once we know the product's per-order cap.
    pub fn quantity_for(&self, terms: &Terms) -> Result<i32, String> {
        if self.quantity > i64::from(terms.max_per_order) {
            return Err(format!(
                "quantity must be at most {} for this product",
                terms.max_per_order
            ));
        }
        Ok(self.quantity as i32)
    }

    /// What an Idempotency-Key remembers of the request, to tell a retry from a reuse.
    pub fn fingerprint(&self) -> Value {
        serde_json::to_value(self).expect("requests serialise")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Guard;

    fn order(user_id: &str, quantity: i64) -> Result<OrderRequest, Error> {
        NewOrder {
            product_id: 1,
            user_id: None,
            quantity,
            pay: true,
            pass: None,
        }
        .parse(user_id.into())
    }

    #[test]
    fn a_pass_is_bounded_whatever_the_product() {
        let with_pass = |pass: String| {
            NewOrder {
                product_id: 1,
                user_id: None,
                quantity: 1,
                pay: true,
                pass: Some(pass),
            }
            .parse("alice".into())
        };
        assert!(with_pass("p".repeat(MAX_PASS)).is_ok());
        let refused = with_pass("p".repeat(MAX_PASS + 1)).unwrap_err();
        assert_eq!(refused.code(), "invalid_request");
    }

    #[test]
    fn user_ids_are_bounded_and_printable() {
        assert!(order("alice", 1).is_ok());
        assert!(order(&"é".repeat(64), 1).is_ok());
        assert!(order("", 1).is_err());
        assert!(order("   ", 1).is_err());
        assert!(order(&"a".repeat(65), 1).is_err());
        assert!(order("a\nb", 1).is_err());
    }

    #[test]
    fn quantity_is_positive_and_capped_per_product() {
        assert!(order("a", 0).is_err());
        assert!(order("a", -3).is_err());
        let product = Terms {
            id: 1,
            price_cents: 1,
            max_per_order: 2,
            per_user_limit: 1,
            reservation_ttl_s: 600,
            guard: Guard::Zk,
            batch_max: 1,
            terms_version: 1,
            window: crate::inventory::Window::default(),
            line: false,
        };
        assert_eq!(order("a", 2).unwrap().quantity_for(&product), Ok(2));
        assert!(order("a", 3).unwrap().quantity_for(&product).is_err());
        assert!(order("a", i64::MAX)
            .unwrap()
            .quantity_for(&product)
            .is_err());
    }

    #[test]
    fn the_fingerprint_fills_in_defaults() {
        let parse = |json| {
            let new = serde_json::from_str::<NewOrder>(json).unwrap();
            let buyer = new.user_id.clone().unwrap();
            new.parse(buyer).unwrap()
        };
        let short = parse(r#"{"product_id": 1, "user_id": "a"}"#);
        let long = parse(r#"{"user_id": "a", "quantity": 1, "pay": true, "product_id": 1}"#);
        assert_eq!(short.fingerprint(), long.fingerprint());
    }
}
