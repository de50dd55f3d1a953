//! What the service tells its operators: logs ([`logs`]: text or JSON lines, each carrying the
//! request's span and its `x-request-id`) and metrics ([`metrics`]: every metric the service
//! exports, named and described in one place, rendered for Prometheus at `GET /metrics`).

pub mod logs;
pub mod metrics;
