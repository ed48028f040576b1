//! A span's fields as text, for the tests that capture spans with a
//! `tracing_subscriber` layer of their own (`tests/tracing.rs`,
//! `tests/request_span.rs`; included with `#[path]`).

use std::collections::HashMap;

use tracing::field::{Field, Visit};

/// Records every field it visits into the map, by name.
pub struct Fields<'a>(pub &'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}
