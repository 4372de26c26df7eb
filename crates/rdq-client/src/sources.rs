//! `/v1/sources`: the status of a server's sources, and a source's cursors
//! in the store, through the same request helpers as the rest of the client.

use rdq_api::sources::{SourceCursorsReset, SourceList, SourceStatus};
use reqwest::Method;

use crate::{Client, ClientError};

impl Client {
    /// `GET /v1/sources`: the sources on a queue the token may read.
    pub async fn sources(&self) -> Result<Vec<SourceStatus>, ClientError> {
        let list: SourceList = self.json(Method::GET, "/v1/sources", None::<&()>).await?;
        Ok(list.sources)
    }

    /// `GET /v1/sources/{name}`.
    pub async fn source(&self, name: &str) -> Result<SourceStatus, ClientError> {
        self.json(Method::GET, &format!("/v1/sources/{name}"), None::<&()>)
            .await
    }

    /// `DELETE /v1/sources/{name}/cursors`: how many cursors were removed.
    pub async fn reset_source_cursors(&self, name: &str) -> Result<u64, ClientError> {
        let reset: SourceCursorsReset = self
            .json(
                Method::DELETE,
                &format!("/v1/sources/{name}/cursors"),
                None::<&()>,
            )
            .await?;
        Ok(reset.deleted)
    }
}
