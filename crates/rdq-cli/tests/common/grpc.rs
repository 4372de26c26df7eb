//! What the gRPC end-to-end tests share: a server configuration with two
//! tokens, authorised requests, and a channel to a running `rdq serve`.

use tonic::Request;
use tonic::transport::Channel;

use super::{FAST_CONFIG, RdqServer};

/// A token with every scope.
pub const ALL: &str = "grpc-all-secret-token-0042";
/// A token that may only submit.
pub const SUBMIT_ONLY: &str = "grpc-submit-secret-0042";

/// The fast test configuration with the [`ALL`] and [`SUBMIT_ONLY`] tokens.
pub fn config() -> String {
    format!(
        "{FAST_CONFIG}\n[[tokens]]\nname = \"all\"\ntoken = \"{ALL}\"\nscopes = [\"admin\", \"submit\", \"work\"]\n\
         [[tokens]]\nname = \"checkout\"\ntoken = \"{SUBMIT_ONLY}\"\nscopes = [\"submit\"]\n"
    )
}

/// `msg` with `token` as its bearer.
pub fn req<T>(msg: T, token: &str) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

/// A connected channel to `server`.
pub async fn channel(server: &RdqServer) -> Channel {
    Channel::from_shared(server.base.clone())
        .unwrap()
        .connect()
        .await
        .unwrap()
}
