//! `GET /openapi.json`: the API's contract, OpenAPI 3.1, generated from the handlers' own
//! annotations and the request and response types they use (utoipa), so it cannot drift from
//! the code. What every operation shares is added here once, by [`Shared`]: the error shape,
//! `Retry-After` on 429 and 503, `x-request-id` on every answer, 413/415 where a body is
//! read, 503 `unavailable` and 500 `internal` everywhere, and the admin bearer scheme.

use axum::routing::get;
use axum::Router;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, ObjectBuilder, Ref, RefOr, Response, ResponseBuilder, Schema, Type,
};
use utoipa::Number;
use utoipa::{Modify, OpenApi};

use super::error::{PROBLEMS, PROBLEM_JSON};
use super::AppState;
use super::{events, health, line, metrics, money, orders, problems, products, recipes, session};
use crate::inventory;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "seckill",
        description = "A flash sale that never oversells: a fair, fenced ZooKeeper lock over PostgreSQL. Every error is an RFC 9457 problem details object (`application/problem+json`): `type` (`/problems/<code>`), `title`, `status`, `detail`, and the extension members `error` (the code), `message` (= `detail`) and `order_id` (when an order row exists); every 429 and 503 carries `Retry-After`."
    ),
    paths(
        orders::create,
        orders::create_of_product,
        orders::pay,
        orders::show,
        orders::list,
        session::sign_in,
        session::whoami,
        session::jwks,
        products::list,
        products::create,
        products::show,
        products::audit,
        products::restock,
        products::lock,
        products::demo,
        products::step,
        recipes::change_terms,
        line::join,
        line::look,
        line::summary,
        line::pause,
        line::resume,
        recipes::terms_lock,
        recipes::terms_lab,
        recipes::semaphore,
        recipes::semaphore_lab,
        money::lost_answer,
        money::charge,
        events::events,
        health::healthz,
        health::readyz,
        metrics::render,
        problems::list,
        problems::show,
        document,
    ),
    modifiers(&Shared, &Bounds),
    tags(
        (name = "orders", description = "Buying, paying a reservation, looking an order up"),
        (name = "buyers", description = "Who buys: signing in (`demo` mode), the session, the demo tokens' keys"),
        (name = "products", description = "Sales, their stock and audit; admin set-up"),
        (name = "line", description = "A sale's line (waiting room): joining it, a buyer's place and pass"),
        (name = "teaching", description = "The lock queue, live events and demos the page shows"),
        (name = "operations", description = "Health, readiness, metrics, this document"),
    )
)]
pub struct ApiDoc;

pub fn router() -> Router<AppState> {
    Router::new().route("/openapi.json", get(document))
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", operation_id = "openapi", tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 description of this API", content_type = "application/json", body = Object)))]
pub(super) async fn document() -> axum::Json<utoipa::openapi::OpenApi> {
    axum::Json(ApiDoc::openapi())
}

/// What every operation shares (see the module docs).
struct Shared;

impl Modify for Shared {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The server's --admin-token"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "buyer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "A buyer's token: an OIDC issuer's (`--buyer-auth jwks`), or one from `POST /api/session` (`demo`). Not needed in `open` mode, where the body's `user_id` is the buyer",
                    ))
                    .build(),
            ),
        );
        // The `error` field lists every code, so a client generator gets an enum.
        if let Some(RefOr::T(Schema::Object(error))) = components.schemas.get_mut("Error") {
            if let Some(RefOr::T(Schema::Object(code))) = error.properties.get_mut("error") {
                code.enum_values = Some(PROBLEMS.iter().map(|p| p.code.into()).collect());
            }
        }
        for item in api.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                share(operation);
            }
        }
    }
}

fn share(operation: &mut Operation) {
    let parameters = operation.parameters.get_or_insert_with(Vec::new);
    parameters.push(
        ParameterBuilder::new()
            .name("x-request-id")
            .parameter_in(ParameterIn::Header)
            .description(Some(
                "Echoed on the answer and put on every log line of the request; one is made if absent or not 1–128 visible ASCII characters",
            ))
            .schema(Some(string_schema()))
            .build(),
    );
    let reads_body = operation.request_body.is_some();
    let responses = &mut operation.responses.responses;
    let mut add = |status: &str, description: &str| {
        responses
            .entry(status.to_string())
            .or_insert_with(|| RefOr::T(error_response(description)));
    };
    if reads_body {
        add("413", "`payload_too_large`: body over 16 KiB");
        add(
            "415",
            "`unsupported_media_type`: body without `Content-Type: application/json`",
        );
    }
    add(
        "503",
        "`unavailable`: PostgreSQL or ZooKeeper unreachable, or the request timed out",
    );
    add("500", "`internal`: a bug, logged in full");
    for (status, response) in responses.iter_mut() {
        let RefOr::T(response) = response else {
            continue;
        };
        // Every error answer is problem details (the handlers' annotations say JSON); a
        // document of its own (`/readyz`'s 503 `Readiness`) stays JSON.
        let is_error = |content: &utoipa::openapi::Content| matches!(&content.schema, Some(RefOr::Ref(r)) if r.ref_location.ends_with("/Error"));
        if status.starts_with(['4', '5'])
            && response
                .content
                .get("application/json")
                .is_some_and(is_error)
        {
            if let Some(content) = response.content.shift_remove("application/json") {
                response.content.insert(PROBLEM_JSON.into(), content);
            }
        }
        response.headers.insert(
            "x-request-id".into(),
            HeaderBuilder::new()
                .schema(string_schema())
                .description(Some("The request's id"))
                .build(),
        );
        if status.starts_with(['4', '5']) {
            response.headers.insert(
                "retry-after".into(),
                HeaderBuilder::new()
                    .schema(
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .pattern(Some("^[0-9]+$")),
                    )
                    .description(Some(
                        "Seconds to wait before asking again: sent exactly when the body's `retryable` is true",
                    ))
                    .build(),
            );
        }
    }
}

fn string_schema() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

fn error_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Error")))
                .build(),
        )
        .build()
}

/// The bounds of every bounded request field, from the one place the checks read them
/// (`inventory::BOUNDS`), so the description cannot drift from what is enforced.
struct Bounds;

impl Modify for Bounds {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let Some(components) = api.components.as_mut() else {
            return;
        };
        let mut fields: Vec<(&str, &str, i64, i64)> = Vec::new();
        for (field, min, max) in inventory::BOUNDS {
            fields.push(("NewProduct", field, min, max));
            if field != "stock" && field != "batch_max" {
                fields.push(("TermsChange", field, min, max));
            }
        }
        fields.push(("Restock", "quantity", 1, inventory::MAX_STOCK));
        fields.push(("NewOrder", "quantity", 1, inventory::MAX_PER_ORDER));
        fields.push(("ProductOrder", "quantity", 1, inventory::MAX_PER_ORDER));
        for (schema, field, min, max) in fields {
            let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(schema) else {
                continue;
            };
            if let Some(RefOr::T(Schema::Object(property))) = object.properties.get_mut(field) {
                property.minimum = Some(Number::Int(min as isize));
                property.maximum = Some(Number::Int(max as isize));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schemas_carry_the_bounds_the_checks_enforce() {
        let api = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let schemas = &api["components"]["schemas"];
        let bound = |schema: &str, field: &str| {
            let property = &schemas[schema]["properties"][field];
            (property["minimum"].as_i64(), property["maximum"].as_i64())
        };
        for (field, min, max) in inventory::BOUNDS {
            assert_eq!(
                bound("NewProduct", field),
                (Some(min), Some(max)),
                "{field}"
            );
        }
        let max_ttl = Some(inventory::MAX_RESERVATION_TTL_S);
        assert_eq!(
            bound("TermsChange", "reservation_ttl_s"),
            (Some(1), max_ttl)
        );
        let max_order = Some(inventory::MAX_PER_ORDER);
        assert_eq!(bound("NewOrder", "quantity"), (Some(1), max_order));
        let max_stock = Some(inventory::MAX_STOCK);
        assert_eq!(bound("Restock", "quantity"), (Some(1), max_stock));
    }
}
