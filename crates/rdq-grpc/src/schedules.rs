//! `rdq.v1.Schedules`: the schedule operations of `/v1/schedules` over
//! gRPC, each a thin adapter over `rdq_app`'s schedule use cases. A
//! schedule's definition travels as the JSON text of the HTTP API
//! (`schedule_json`), read by the same `rdq_api` type, so both front ends
//! refuse and default alike; the firing state is typed.

use rdq_api::schedules::{ScheduleBody, ScheduleState};
use rdq_app::AppError;
use rdq_app::schedules::{DEFAULT_NEXT_DUE, check_name, owner_of, schedule_from_body};
use tonic::{Request, Response, Status};

use crate::messages::task_response;
use crate::pb;
use crate::service::GrpcApi;
use crate::status::to_status;

fn st(e: AppError) -> Status {
    to_status(&e)
}

/// A stored schedule as its message.
fn schedule_response(state: ScheduleState) -> Result<pb::ScheduleResponse, Status> {
    let schedule_json = serde_json::to_string(&state.schedule).map_err(|e| {
        st(AppError::internal(format!(
            "the schedule does not serialise: {e}"
        )))
    })?;
    Ok(pb::ScheduleResponse {
        name: state.name,
        schedule_json,
        owner: state.owner,
        created_at_ms: state.created_at_ms,
        updated_at_ms: state.updated_at_ms,
        last_due_ms: state.last_due_ms,
        last_fire_at_ms: state.last_fire_at_ms,
        last_fired_task: state.last_fired_task,
        next_due_ms: state.next_due_ms,
        fires: state.fires,
        skips: state.skips.into_iter().collect(),
    })
}

#[tonic::async_trait]
impl pb::schedules_server::Schedules for GrpcApi {
    async fn put(
        &self,
        request: Request<pb::PutScheduleRequest>,
    ) -> Result<Response<pb::PutScheduleResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        check_name(&msg.name).map_err(st)?;
        let body: ScheduleBody = serde_json::from_str(&msg.schedule_json).map_err(|e| {
            st(AppError::malformed(format!(
                "schedule_json is not a schedule: {e}"
            )))
        })?;
        let owner = owner_of(Some(&msg.owner)).map_err(st)?;
        let schedule = schedule_from_body(&msg.name, body).map_err(st)?;
        let (state, created) = self
            .app()
            .put_schedule(&caller, schedule, owner)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::PutScheduleResponse {
            schedule: Some(schedule_response(state)?),
            created,
        }))
    }

    async fn get(
        &self,
        request: Request<pb::GetScheduleRequest>,
    ) -> Result<Response<pb::ScheduleResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let state = self
            .app()
            .schedule(&caller, &request.get_ref().name)
            .await
            .map_err(st)?;
        Ok(Response::new(schedule_response(state)?))
    }

    async fn list(
        &self,
        request: Request<pb::ListSchedulesRequest>,
    ) -> Result<Response<pb::ListSchedulesResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let schedules = self
            .app()
            .schedules(&caller)
            .await
            .map_err(st)?
            .into_iter()
            .map(schedule_response)
            .collect::<Result<_, _>>()?;
        Ok(Response::new(pb::ListSchedulesResponse { schedules }))
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteScheduleRequest>,
    ) -> Result<Response<pb::DeleteScheduleResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        self.app()
            .delete_schedule(&caller, &request.get_ref().name)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::DeleteScheduleResponse {}))
    }

    async fn pause(
        &self,
        request: Request<pb::PauseScheduleRequest>,
    ) -> Result<Response<pb::ScheduleResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let state = self
            .app()
            .set_schedule_paused(&caller, &request.get_ref().name, true)
            .await
            .map_err(st)?;
        Ok(Response::new(schedule_response(state)?))
    }

    async fn resume(
        &self,
        request: Request<pb::ResumeScheduleRequest>,
    ) -> Result<Response<pb::ScheduleResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let state = self
            .app()
            .set_schedule_paused(&caller, &request.get_ref().name, false)
            .await
            .map_err(st)?;
        Ok(Response::new(schedule_response(state)?))
    }

    async fn run(
        &self,
        request: Request<pb::RunScheduleRequest>,
    ) -> Result<Response<pb::TaskResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let env = self
            .app()
            .run_schedule(&caller, &request.get_ref().name)
            .await
            .map_err(st)?;
        Ok(Response::new(task_response(&env)))
    }

    async fn next(
        &self,
        request: Request<pb::NextDueRequest>,
    ) -> Result<Response<pb::NextDueResponse>, Status> {
        let caller = self.caller(request.metadata())?;
        let msg = request.into_inner();
        let count = match msg.count {
            0 => DEFAULT_NEXT_DUE,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let due_ms = self
            .app()
            .next_due(&caller, &msg.name, count)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::NextDueResponse {
            name: msg.name,
            due_ms,
        }))
    }
}
