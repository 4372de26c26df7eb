//! What the PostgreSQL store's tests share: where the test database is.

#![allow(dead_code)]

/// The database tests run against: `RDQ_TEST_POSTGRES`, else the local one.
pub fn url() -> String {
    std::env::var("RDQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// The test database URL, naming `schema`.
pub fn url_with_schema(schema: &str) -> String {
    let url = url();
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}schema={schema}")
}
