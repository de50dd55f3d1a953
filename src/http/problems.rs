//! `GET /problems/{code}`: what an error answer's `type` points at (RFC 9457 wants a problem
//! type to be a URI a person can follow), served from the table the answers are written
//! from ([`PROBLEMS`]), so a documented type cannot drift from an answered one.

use axum::routing::get;
use axum::Router;
use serde::Serialize;

use super::error::{ApiError, ErrorBody, Problem, PROBLEMS};
use super::{AppState, Json, Path};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/problems", get(list))
        .route("/problems/{code}", get(show))
}

/// A problem type, as its URI describes it.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct ProblemType {
    /// Its URI: the `type` of every answer with this code.
    #[serde(rename = "type")]
    kind: String,
    /// The `error` code answers carry.
    code: &'static str,
    /// The status answers with this code are sent with.
    status: u16,
    /// Whether the same request may succeed if sent again (after `Retry-After`).
    retryable: bool,
    title: &'static str,
}

impl From<&Problem> for ProblemType {
    fn from(p: &Problem) -> ProblemType {
        ProblemType {
            kind: p.uri(),
            code: p.code,
            status: p.status.as_u16(),
            retryable: p.retryable,
            title: p.title,
        }
    }
}

/// Every problem type an answer can carry.
#[utoipa::path(get, path = "/problems", operation_id = "listProblems", tag = "operations",
    responses((status = 200, description = "Every problem type, in the order of docs/api.md's table of codes", body = [ProblemType])))]
pub(super) async fn list() -> Json<Vec<ProblemType>> {
    Json(PROBLEMS.iter().map(ProblemType::from).collect())
}

/// One problem type: what an error answer's `type` points at.
#[utoipa::path(get, path = "/problems/{code}", operation_id = "getProblem", tag = "operations",
    params(("code" = String, Path, description = "An error code, e.g. `sold_out`")),
    responses(
        (status = 200, description = "The problem type", body = ProblemType),
        (status = 400, description = "`invalid_request`: a code that is not valid UTF-8", body = ErrorBody<'static>),
        (status = 404, description = "`not_found`: no such problem type", body = ErrorBody<'static>),
    ))]
pub(super) async fn show(Path(code): Path<String>) -> Result<Json<ProblemType>, ApiError> {
    Problem::of(&code)
        .map(|p| Json(ProblemType::from(p)))
        .ok_or(ApiError::RouteNotFound)
}
