//! `rdq.v1.Sources`: the source operations of `/v1/sources` over gRPC,
//! each a thin adapter over `rdq_app`'s source use cases.

use rdq_api::sources::SourceStatus;
use rdq_app::AppError;
use tonic::{Request, Response, Status};

use crate::pb;
use crate::service::GrpcApi;
use crate::status::to_status;

fn st(e: AppError) -> Status {
    to_status(&e)
}

/// A source's status as its message.
fn source_response(s: SourceStatus) -> pb::SourceResponse {
    pb::SourceResponse {
        name: s.name,
        kind: s.kind.as_str().to_owned(),
        queue: s.queue,
        state: s.state.as_str().to_owned(),
        paused: s.paused,
        lag: s.lag,
        ingested: s.ingested,
        dead: s.dead,
        duplicates: s.duplicates,
        rate: s.rate,
        last_error: s.last_error,
        last_error_at_ms: s.last_error_at_ms,
        cursors_in_store: s.cursors_in_store,
        partitions: s
            .partitions
            .into_iter()
            .map(|p| pb::SourcePartition {
                partition: p.partition,
                cursor: p.cursor,
                lag: p.lag,
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl pb::sources_server::Sources for GrpcApi {
    async fn list(
        &self,
        request: Request<pb::ListSourcesRequest>,
    ) -> Result<Response<pb::ListSourcesResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let sources = self
            .app()
            .sources(&caller)
            .into_iter()
            .map(source_response)
            .collect();
        Ok(Response::new(pb::ListSourcesResponse { sources }))
    }

    async fn get(
        &self,
        request: Request<pb::GetSourceRequest>,
    ) -> Result<Response<pb::SourceResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let status = self
            .app()
            .source(&caller, &request.get_ref().name)
            .map_err(st)?;
        Ok(Response::new(source_response(status)))
    }

    async fn reset_cursors(
        &self,
        request: Request<pb::ResetSourceCursorsRequest>,
    ) -> Result<Response<pb::ResetSourceCursorsResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let name = request.into_inner().name;
        let deleted = self
            .app()
            .reset_source_cursors(&caller, &name)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::ResetSourceCursorsResponse {
            name,
            deleted,
        }))
    }
}
