//! Reading a command's input: a file path, or `-` (or nothing) for stdin.

use std::io::Read;
use std::path::Path;

use crate::CliError;

/// Reads all of `source` (`None` or `-` means standard input).
pub fn read_all(source: Option<&Path>) -> Result<Vec<u8>, CliError> {
    let mut bytes = Vec::new();
    match source {
        None => std::io::stdin().read_to_end(&mut bytes).map(|_| ()),
        Some(p) if p.as_os_str() == "-" => std::io::stdin().read_to_end(&mut bytes).map(|_| ()),
        Some(p) => std::fs::read(p).map(|b| bytes = b),
    }
    .map_err(|e| {
        let name = source.map_or("standard input".into(), |p| p.display().to_string());
        CliError::new("IO_ERROR", format!("cannot read {name}: {e}"))
    })?;
    Ok(bytes)
}
