//! `services`, `service ID` and `service ID start|stop|restart`, printed as talosctl prints
//! them: a table with the newest event of each service, a detail block with its events newest
//! first, a `NODE RESPONSE` table for actions.

use cosi_api::auth::{required_role, Role};
use cosi_api::machine::{ServiceAction, ServiceStatus};

use crate::args::{ServiceActionArg, ServiceArgs};
use crate::error::CliError;
use crate::print::age;
use crate::session::{Io, Report, Session};
use crate::table::TabWriter;

const SERVICE_LIST: &str = "/cosi.machine.MachineService/ServiceList";

/// `?` before the first check, `OK` or `Fail`.
fn health(service: &ServiceStatus) -> &'static str {
    match (service.health.unknown, service.health.healthy) {
        (true, _) => "?",
        (false, true) => "OK",
        (false, false) => "Fail",
    }
}

/// Runs `services`.
pub async fn list(session: &Session, io: &mut Io<'_>) -> Result<Report, CliError> {
    let results = session
        .each(|node| async move {
            node.call(
                "list services",
                required_role(SERVICE_LIST),
                node.machine.services(),
            )
            .await
        })
        .await;
    let now = (io.now)();
    let mut report = Report::default();
    let mut table = TabWriter::default();
    table.row([
        "NODE",
        "SERVICE",
        "STATE",
        "HEALTH",
        "LAST CHANGE",
        "LAST EVENT",
    ]);
    let mut answered = false;
    for (node, result) in results {
        match result {
            Ok(services) => {
                answered = true;
                for service in services {
                    let newest = service.events.last();
                    table.row([
                        node.name.clone(),
                        service.id.clone(),
                        service.state.clone(),
                        health(&service).to_string(),
                        newest.map_or(String::new(), |e| format!("{} ago", age(now, e.time))),
                        newest.map_or("<none>".to_string(), |e| e.message.clone()),
                    ]);
                }
            }
            Err(e) => report.fail(io, &e),
        }
    }
    if answered {
        table.flush(io.out).map_err(CliError::output)?;
    }
    Ok(report)
}

/// Runs `service ID [ACTION]`.
pub async fn one(
    session: &Session,
    args: &ServiceArgs,
    io: &mut Io<'_>,
) -> Result<Report, CliError> {
    match args.action {
        None => show(session, &args.id, io).await,
        Some(action) => act(session, &args.id, action, io).await,
    }
}

async fn show(session: &Session, id: &str, io: &mut Io<'_>) -> Result<Report, CliError> {
    let results = session
        .each(|node| async move {
            let services = node
                .call(
                    format!("get service {id}"),
                    required_role(SERVICE_LIST),
                    node.machine.services(),
                )
                .await?;
            services.into_iter().find(|s| s.id == id).ok_or_else(|| {
                CliError::Other(format!(
                    "node {}: service {id:?} not found (list them with `cosictl services`)",
                    node.name
                ))
            })
        })
        .await;
    let now = (io.now)();
    let mut report = Report::default();
    let mut blocks = 0;
    for (node, result) in results {
        let service = match result {
            Ok(service) => service,
            Err(e) => {
                report.fail(io, &e);
                continue;
            }
        };
        if blocks > 0 {
            writeln!(io.out).map_err(CliError::output)?;
        }
        blocks += 1;
        let mut table = TabWriter::default();
        table.row(["NODE", &node.name]);
        table.row(["ID", &service.id]);
        table.row(["STATE", &service.state]);
        table.row(["HEALTH", health(&service)]);
        if !service.health.last_message.is_empty() {
            table.row(["LAST HEALTH MESSAGE", &service.health.last_message]);
        }
        let mut label = "EVENTS";
        for event in service.events.iter().rev() {
            table.row([
                label.to_string(),
                format!(
                    "[{}]: {} ({} ago)",
                    event.state,
                    event.message,
                    age(now, event.time)
                ),
            ]);
            label = "";
        }
        table.flush(io.out).map_err(CliError::output)?;
    }
    Ok(report)
}

async fn act(
    session: &Session,
    id: &str,
    action: ServiceActionArg,
    io: &mut Io<'_>,
) -> Result<Report, CliError> {
    let (action, name) = match action {
        ServiceActionArg::Start => (ServiceAction::Start, "start"),
        ServiceActionArg::Stop => (ServiceAction::Stop, "stop"),
        ServiceActionArg::Restart => (ServiceAction::Restart, "restart"),
    };
    let results = session
        .each(|node| async move {
            node.call(
                format!("{name} service {id}"),
                Role::Operator,
                node.machine.service_action(id, action),
            )
            .await
        })
        .await;
    let mut report = Report::default();
    let mut table = TabWriter::default();
    table.row(["NODE", "RESPONSE"]);
    let mut answered = false;
    for (node, result) in results {
        match result {
            Ok(response) => {
                answered = true;
                table.row([node.name.clone(), response]);
            }
            Err(e) => report.fail(io, &e),
        }
    }
    if answered {
        table.flush(io.out).map_err(CliError::output)?;
    }
    Ok(report)
}
