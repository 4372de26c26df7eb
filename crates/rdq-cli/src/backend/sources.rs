//! The source operations (`rdq source status`, `rdq source reset`) of both
//! backends: [`Remote`] over the client's `/v1/sources` calls, [`Local`]
//! over the application layer. A source's status lives in the process that
//! runs it, so only a server can tell it; its cursors live in the store,
//! which both can reset.

use async_trait::async_trait;
use rdq_api::sources::SourceStatus;

use super::{Local, Remote};
use crate::CliError;

/// What a store opened directly cannot tell: the status of sources.
const STATUS_HINT: &str = "a source's status lives in the process that runs it: ask the server with --server URL (or RDQ_SERVER)";

/// Sources' status and cursors, on a server or straight on a store.
#[async_trait(?Send)]
pub trait SourceOperations {
    /// Every source the server runs on a queue the caller may read.
    async fn sources(&self) -> Result<Vec<SourceStatus>, CliError>;
    /// One source.
    async fn source(&self, name: &str) -> Result<SourceStatus, CliError>;
    /// Removes the source's cursors from the store; how many there were.
    async fn reset_source_cursors(&self, name: &str) -> Result<u64, CliError>;
}

/// `UNSUPPORTED`: a store opened directly holds no source's status.
fn no_status() -> CliError {
    CliError::new(
        "UNSUPPORTED",
        format!("--store cannot show sources; {STATUS_HINT}"),
    )
}

#[async_trait(?Send)]
impl SourceOperations for Local {
    async fn sources(&self) -> Result<Vec<SourceStatus>, CliError> {
        Err(no_status())
    }

    async fn source(&self, name: &str) -> Result<SourceStatus, CliError> {
        rdq_app::sources::check_source_name(name)?;
        Err(no_status())
    }

    async fn reset_source_cursors(&self, name: &str) -> Result<u64, CliError> {
        Ok(self.app.reset_source_cursors(&self.caller, name).await?)
    }
}

#[async_trait(?Send)]
impl SourceOperations for Remote {
    async fn sources(&self) -> Result<Vec<SourceStatus>, CliError> {
        Ok(self.client.sources().await?)
    }

    async fn source(&self, name: &str) -> Result<SourceStatus, CliError> {
        rdq_app::sources::check_source_name(name)?;
        Ok(self.client.source(name).await?)
    }

    async fn reset_source_cursors(&self, name: &str) -> Result<u64, CliError> {
        rdq_app::sources::check_source_name(name)?;
        Ok(self.client.reset_source_cursors(name).await?)
    }
}
