//! Products and their stock: what a product is ([`product`]), its terms of sale ([`terms`]),
//! and every stock change under its product's guard ([`guard`] enters it, [`stock`] reads,
//! checks and writes, [`fence`] makes sure only the current lock holder's write lands).
//!
//! The rules (what a valid product is, what a read-check-write decides, what the audit
//! concludes) are plain functions; the SQL around them sits beside them.

mod ensembles;
mod fence;
mod guard;
mod many;
mod product;
mod seed;
mod stock;
mod terms;
mod window;

pub use ensembles::{keep_standing, Standing, SILENCE};
pub use guard::{enter, enter_as, enter_for_sale, Guard, Protection};
pub use many::{read_fenced, write_fenced, FencedRead, FencedWrite};
pub use product::{
    audit, create, fence, get, list, stock, Audit, NewProduct, Product, BOUNDS, MAX_BATCH,
    MAX_PER_ORDER, MAX_PER_USER, MAX_PRICE_CENTS, MAX_RESERVATION_TTL_S, MAX_STOCK,
};
pub use seed::seed_demo;
pub use stock::{
    allow_idle, change_stock, next_stock, read_stock, restock, think, Change, Figures, Outcome,
    Read, StockRead,
};
pub use terms::{change_terms, Catalog, Current, Terms, TermsChange};
pub use window::{SaleState, Window};
