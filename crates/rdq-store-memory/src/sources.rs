//! Sources' cursors in memory: a map by source and partition beside the
//! tasks.
//!
//! An ingest holds the cursors' lock while it checks the cursor, submits
//! under the tasks' lock and moves the cursor: no other ingest of the
//! partition can run between the three, so they are one step. The lock
//! order is always cursors, then tasks.

use std::collections::BTreeMap;

use async_trait::async_trait;
use rdq_engine::{EngineError, IngestOutcome, IngestRequest, SourceCursor, SourceCursors};

use crate::MemoryStore;

/// Each cursor (next position, when it moved) by source, then partition.
pub(crate) type CursorMap = BTreeMap<String, BTreeMap<String, (u64, i64)>>;

#[async_trait]
impl SourceCursors for MemoryStore {
    async fn source_cursors(&self, source: &str) -> Result<Vec<SourceCursor>, EngineError> {
        Ok(self
            .cursors()
            .get(source)
            .into_iter()
            .flatten()
            .map(|(partition, &(next, updated_at_ms))| SourceCursor {
                partition: partition.clone(),
                next,
                updated_at_ms,
            })
            .collect())
    }

    async fn ingest(&self, request: &IngestRequest) -> Result<IngestOutcome, EngineError> {
        let mut cursors = self.cursors();
        let partitions = cursors.entry(request.source.clone()).or_default();
        let current = partitions.get(&request.partition).map(|&(next, _)| next);
        if current != request.expected {
            return Ok(IngestOutcome::Moved { current });
        }
        let results = {
            let mut state = self.state();
            request
                .tasks
                .iter()
                .map(|task| state.submit(task.clone()))
                .collect()
        };
        partitions.insert(request.partition.clone(), (request.next, request.now_ms));
        Ok(IngestOutcome::Ingested(results))
    }

    async fn delete_source_cursors(&self, source: &str) -> Result<u64, EngineError> {
        Ok(self
            .cursors()
            .remove(source)
            .map_or(0, |partitions| partitions.len() as u64))
    }
}
