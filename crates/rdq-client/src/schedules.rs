//! `/v1/schedules`: periodic schedules (`docs/schedules.md`), through the
//! same request helpers as the rest of the client.

use rdq_api::schedules::{NextDue, ScheduleBody, ScheduleList, ScheduleState};
use rdq_envelope::Envelope;
use reqwest::{Method, StatusCode};

use crate::{Client, ClientError, parse, query};

impl Client {
    /// `PUT /v1/schedules/{name}`: the stored schedule, and whether it is new.
    pub async fn put_schedule(
        &self,
        name: &str,
        body: &ScheduleBody,
    ) -> Result<(ScheduleState, bool), ClientError> {
        let response = self
            .call(Method::PUT, &format!("/v1/schedules/{name}"), Some(body))
            .await?;
        let created = response.status() == StatusCode::CREATED;
        Ok((parse(&self.bytes(response).await?)?, created))
    }

    /// `GET /v1/schedules`.
    pub async fn schedules(&self) -> Result<Vec<ScheduleState>, ClientError> {
        let list: ScheduleList = self.json(Method::GET, "/v1/schedules", None::<&()>).await?;
        Ok(list.schedules)
    }

    /// `GET /v1/schedules/{name}`.
    pub async fn schedule(&self, name: &str) -> Result<ScheduleState, ClientError> {
        self.json(Method::GET, &format!("/v1/schedules/{name}"), None::<&()>)
            .await
    }

    /// `DELETE /v1/schedules/{name}`.
    pub async fn delete_schedule(&self, name: &str) -> Result<(), ClientError> {
        self.call(
            Method::DELETE,
            &format!("/v1/schedules/{name}"),
            None::<&()>,
        )
        .await
        .map(drop)
    }

    /// `POST /v1/schedules/{name}/pause` or `…/resume`.
    pub async fn set_schedule_paused(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleState, ClientError> {
        let verb = if paused { "pause" } else { "resume" };
        self.json(
            Method::POST,
            &format!("/v1/schedules/{name}/{verb}"),
            None::<&()>,
        )
        .await
    }

    /// `POST /v1/schedules/{name}/run`: the task submitted now.
    pub async fn run_schedule(&self, name: &str) -> Result<Envelope, ClientError> {
        self.envelope(
            Method::POST,
            &format!("/v1/schedules/{name}/run"),
            None::<&()>,
        )
        .await
    }

    /// `GET /v1/schedules/{name}/next?count=N`: the next due times (ms).
    pub async fn next_due(&self, name: &str, count: usize) -> Result<Vec<i64>, ClientError> {
        let next: NextDue = self
            .json(
                Method::GET,
                &format!(
                    "/v1/schedules/{name}/next?{}",
                    query(&[("count", count.to_string())])
                ),
                None::<&()>,
            )
            .await?;
        Ok(next.due_ms)
    }
}
