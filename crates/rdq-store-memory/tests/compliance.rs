//! The in-memory store against the whole compliance suite: one test per check.

rdq_compliance::store_tests!(|| async { rdq_store_memory::MemoryStore::new() });
