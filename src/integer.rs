//! Integers in request bodies, as JSON Schema (and so our OpenAPI description) counts them:
//! `3` and `3.0` are the same integer. serde reads `3.0` as a float and refuses it for an
//! `i64`; clients whose JSON libraries write whole numbers as floats would get a 400 for a
//! request the contract allows.

use serde::de::{Deserialize, Deserializer, Error};
use serde_json::Number;

/// For `#[serde(deserialize_with = "crate::integer::whole")]` on an `i64`.
pub fn whole<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    from_number(Number::deserialize(deserializer)?)
}

/// [`whole`], for an `Option<i64>` (with `#[serde(default)]`).
pub fn optional<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    Option::<Number>::deserialize(deserializer)?
        .map(from_number)
        .transpose()
}

fn from_number<E: Error>(n: Number) -> Result<i64, E> {
    if let Some(i) = n.as_i64() {
        return Ok(i);
    }
    // 2^63 as f64: below it every whole float converts to an i64 exactly.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && (-LIMIT..LIMIT).contains(&f) => Ok(f as i64),
        _ => Err(E::custom(format!(
            "invalid value: {n}, expected an integer"
        ))),
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize, Debug)]
    struct Body {
        #[serde(deserialize_with = "super::whole")]
        n: i64,
        #[serde(default, deserialize_with = "super::optional")]
        m: Option<i64>,
    }

    fn parse(json: &str) -> Result<Body, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn whole_floats_are_integers_and_nothing_else_is() {
        assert_eq!(parse(r#"{"n": 3}"#).unwrap().n, 3);
        assert_eq!(parse(r#"{"n": 3.0}"#).unwrap().n, 3);
        assert_eq!(parse(r#"{"n": -7e2}"#).unwrap().n, -700);
        assert_eq!(parse(r#"{"n": 1, "m": 2.0}"#).unwrap().m, Some(2));
        assert_eq!(parse(r#"{"n": 1}"#).unwrap().m, None);
        assert_eq!(parse(r#"{"n": 1, "m": null}"#).unwrap().m, None);
        assert!(parse(r#"{"n": 3.5}"#).is_err());
        assert!(parse(r#"{"n": "3"}"#).is_err());
        assert!(parse(r#"{"n": 1e300}"#).is_err());
        assert!(parse(r#"{"n": 18446744073709551615}"#).is_err());
    }
}
