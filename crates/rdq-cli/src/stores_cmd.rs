//! `rdq stores`: the stores this build opens (each a cargo feature), how
//! `--store` names each, the URL parameters each understands and the
//! queue-configuration sections each reads.

use clap::Args;
use serde_json::json;

use crate::CliError;
use crate::output::{self, out, outln};
use crate::stores::Registry;

/// Arguments of `rdq stores`.
#[derive(Debug, Args)]
pub struct StoresArgs {
    /// Print JSON for scripts instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `rdq stores`.
pub fn run(args: StoresArgs) -> Result<(), CliError> {
    let entries = Registry::compiled().entries();
    if args.json {
        let stores: Vec<_> = entries
            .iter()
            .map(|e| {
                json!({
                    "store": e.name,
                    "feature": e.feature,
                    "store_values": e.forms(),
                    "url_parameters": e.parameters,
                    "config_sections": e.config_sections,
                })
            })
            .collect();
        return outln!("{}", json!({ "stores": stores }));
    }
    let list = |items: &[&str]| {
        if items.is_empty() {
            "—".to_owned()
        } else {
            items.join(", ")
        }
    };
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                e.name.to_owned(),
                e.feature.to_owned(),
                e.forms().join(", "),
                list(e.config_sections),
                list(e.parameters),
            ]
        })
        .collect();
    out!(
        "{}",
        output::table(
            &[
                "STORE",
                "FEATURE",
                "--store",
                "QUEUE SECTIONS",
                "URL PARAMETERS"
            ],
            &rows
        )
    )
}
