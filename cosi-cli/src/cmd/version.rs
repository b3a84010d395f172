//! `version`: the client's build, and each node's.

use cosi_api::auth::required_role;

use crate::error::CliError;
use crate::session::{Io, Report, Session};
use crate::terminal::escape_controls;

/// Prints the client's version block.
pub fn client(io: &mut Io<'_>) -> Result<(), CliError> {
    writeln!(
        io.out,
        "Client:\n\tTag:         v{}\n\tOS/Arch:     {}/{}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
    .map_err(CliError::output)
}

/// Runs `version`: the client's block, then one `Server:` block per node.
pub async fn run(session: &Session, io: &mut Io<'_>) -> Result<Report, CliError> {
    client(io)?;
    let results = session
        .each(|node| async move {
            node.call(
                "version",
                required_role("/cosi.machine.MachineService/Version"),
                node.machine.version(),
            )
            .await
        })
        .await;
    let mut report = Report::default();
    for (node, result) in results {
        match result {
            Ok(v) => {
                let [tag, sha, built, rust, os, arch] =
                    [&v.tag, &v.sha, &v.built, &v.rust_version, &v.os, &v.arch]
                        .map(|field| escape_controls(field));
                writeln!(
                    io.out,
                    "Server:\n\tNODE:        {}\n\tTag:         {tag}\n\tSHA:         {sha}\n\tBuilt:       {built}\n\tRust:        {rust}\n\tOS/Arch:     {os}/{arch}",
                    node.name
                )
                .map_err(CliError::output)?
            }
            Err(e) => report.fail(io, &e),
        }
    }
    Ok(report)
}
