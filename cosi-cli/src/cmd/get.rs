//! `get TYPE [ID]`: resources of any type, from every node concurrently, as a table, YAML or
//! JSON; `-w` keeps watching.
//!
//! The type is resolved on the first node (in the order named) that lists its definitions;
//! nodes that cannot be reached are reported on their own error line and the others still
//! print. With `-w`, a table prints its header and the initial contents once every node has
//! sent its own (`+` rows), then one row per change: `+` created, `-` destroyed, a space
//! updated.

use std::collections::BTreeSet;
use std::io::Write;

use cosi_core::{
    Columns, Event, IdQuery, Kind, ListOptions, SharedResource, State, WatchKindOptions,
};
use futures::StreamExt;

use crate::args::{GetArgs, OutputFormat};
use crate::error::CliError;
use crate::nodes::Node;
use crate::print;
use crate::resolve;
use crate::session::{Io, Report, Session};
use crate::table::TabWriter;

fn what(verb: &str, kind: &Kind, id: Option<&str>) -> String {
    match id {
        Some(id) => format!("{verb} {}", kind.pointer(id)),
        None => format!("{verb} {kind}"),
    }
}

/// Runs `get`.
pub async fn run(session: &Session, args: &GetArgs, io: &mut Io<'_>) -> Result<Report, CliError> {
    let mut report = Report::default();
    let Some(target) = resolve::on_first_node(
        session,
        &args.resource_type,
        args.namespace.as_deref(),
        io,
        &mut report,
    )
    .await?
    else {
        return Ok(report);
    };
    let columns = Columns::new(&target.definition).map_err(|e| CliError::Other(e.to_string()))?;
    if args.watch {
        watch(session, args, &target, &columns, io, report).await
    } else {
        read(session, args, &target, &columns, io, report).await
    }
}

async fn read(
    session: &Session,
    args: &GetArgs,
    target: &resolve::Target,
    columns: &Columns<'_>,
    io: &mut Io<'_>,
    mut report: Report,
) -> Result<Report, CliError> {
    let needs = resolve::read_role(&target.definition);
    let what = what("get", &target.kind, args.id.as_deref());
    let nodes: Vec<&Node> = target.live.iter().map(|&i| &session.nodes[i]).collect();
    let results = futures::future::join_all(nodes.iter().map(|node| {
        node.call(what.clone(), needs, async {
            match &args.id {
                Some(id) => node
                    .state
                    .get(&target.kind.pointer(id.as_str()))
                    .await
                    .map(|r| vec![r]),
                None => node.state.list(&target.kind, &ListOptions::default()).await,
            }
        })
    }))
    .await;

    let mut printer = Printer::new(args.output, columns, false);
    let mut answered = false;
    for (node, result) in nodes.iter().zip(results) {
        match result {
            Ok(resources) => {
                answered = true;
                for resource in &resources {
                    printer.resource(io, &mut report, &node.name, None, resource)?;
                }
            }
            Err(e) => report.fail(io, &e),
        }
    }
    // A table of nodes that all failed would be a lone header.
    if answered {
        printer.finish(io.out)?;
    }
    Ok(report)
}

async fn watch(
    session: &Session,
    args: &GetArgs,
    target: &resolve::Target,
    columns: &Columns<'_>,
    io: &mut Io<'_>,
    mut report: Report,
) -> Result<Report, CliError> {
    let needs = resolve::read_role(&target.definition);
    let what = what("watch", &target.kind, args.id.as_deref());
    let ids = match &args.id {
        Some(id) => Some(IdQuery::exact(id).map_err(|e| CliError::Other(e.to_string()))?),
        None => None,
    };
    let options = WatchKindOptions {
        bootstrap: true,
        ids,
        ..WatchKindOptions::default()
    };
    let nodes: Vec<&Node> = target.live.iter().map(|&i| &session.nodes[i]).collect();
    // The watch is open once the node said so: the deadline bounds that, not the watch.
    let opened = futures::future::join_all(nodes.iter().map(|node| {
        node.call(
            what.clone(),
            needs,
            node.state.watch_kind(&target.kind, options.clone()),
        )
    }))
    .await;

    let mut streams = Vec::new();
    let mut bootstrapping = BTreeSet::new();
    for (i, result) in opened.into_iter().enumerate() {
        match result {
            Ok(watch) => {
                bootstrapping.insert(i);
                let events = futures::stream::unfold(watch, |mut watch| async move {
                    watch.recv().await.map(|event| (event, watch))
                });
                streams.push(events.map(move |event| (i, event)).boxed_local());
            }
            Err(e) => report.fail(io, &e),
        }
    }
    let mut printer = Printer::new(args.output, columns, true);
    if streams.is_empty() {
        return Ok(report);
    }
    let mut events = futures::stream::select_all(streams);
    loop {
        let next = tokio::select! {
            _ = &mut io.stop => None,
            next = events.next() => next,
        };
        let Some((i, event)) = next else { break };
        let node = &nodes[i].name;
        let (marker, name) = match &event {
            Event::Created { .. } => ("+", "created"),
            Event::Updated { .. } => (" ", "updated"),
            Event::Destroyed { .. } => ("-", "destroyed"),
            Event::Bootstrapped { .. } => {
                bootstrapping.remove(&i);
                if bootstrapping.is_empty() {
                    printer.flush(io.out)?;
                }
                continue;
            }
            Event::Errored { error } => {
                let error = CliError::node(node, what.clone(), error.clone(), needs);
                report.fail(io, &error);
                if bootstrapping.remove(&i) && bootstrapping.is_empty() {
                    printer.flush(io.out)?;
                }
                continue;
            }
            // Bookmarks and resyncs carry nothing to show (the contents follow as events).
            _ => continue,
        };
        if let Some(resource) = event.resource() {
            printer.resource(io, &mut report, node, Some((marker, name)), resource)?;
            if bootstrapping.is_empty() {
                printer.flush(io.out)?;
            }
        }
    }
    printer.finish(io.out)?;
    Ok(report)
}

/// Resources in the chosen format.
struct Printer<'c> {
    format: OutputFormat,
    columns: &'c Columns<'c>,
    watching: bool,
    table: TabWriter,
    header: bool,
    documents: usize,
}

/// A resource of `node` that cannot be shown in `format` (a timestamp RFC 3339 cannot write, a
/// resource of another type in a table): what is wrong, and which format shows it.
fn unprintable(
    node: &str,
    format: OutputFormat,
    resource: &SharedResource,
    error: cosi_core::Error,
) -> CliError {
    let reason = match error {
        cosi_core::Error::InvalidArgument { field, message, .. } => {
            format!("invalid {field}: {message}")
        }
        other => other.to_string(),
    };
    let (name, other) = match format {
        OutputFormat::Table => ("a table", "-o yaml"),
        OutputFormat::Yaml => ("YAML", "-o table"),
        OutputFormat::Json => ("JSON", "-o table"),
    };
    CliError::Other(format!(
        "node {node}: cannot print {} as {name}: {reason} (`{other}` shows it)",
        resource.metadata().pointer()
    ))
}

impl<'c> Printer<'c> {
    fn new(format: OutputFormat, columns: &'c Columns<'c>, watching: bool) -> Self {
        Printer {
            format,
            columns,
            watching,
            table: TabWriter::default(),
            header: false,
            documents: 0,
        }
    }

    /// Prints `resource` (as the event `(marker, name)` when watching). One that cannot be
    /// shown in the format is reported on its own error line and counted, and the command goes
    /// on: one odd resource from one node does not hide the others. Only a failure to write
    /// the output ends the command.
    fn resource(
        &mut self,
        io: &mut Io<'_>,
        report: &mut Report,
        node: &str,
        event: Option<(&str, &str)>,
        resource: &SharedResource,
    ) -> Result<(), CliError> {
        let (marker, name) = (event.map(|(m, _)| m), event.map(|(_, n)| n));
        let document = match self.format {
            OutputFormat::Table => print::row(self.columns, node, marker, &**resource).map(|row| {
                self.ensure_header();
                self.table.row(row);
                None
            }),
            OutputFormat::Yaml => print::resource_yaml(node, name, &**resource).map(Some),
            OutputFormat::Json => print::resource_json(node, name, &**resource).map(Some),
        };
        let text = match document {
            Ok(Some(text)) => text,
            Ok(None) => return Ok(()),
            Err(e) => {
                report.fail(io, &unprintable(node, self.format, resource, e));
                return Ok(());
            }
        };
        let written = if self.format == OutputFormat::Yaml {
            // YAML documents end in a newline and are separated by `---`; JSON objects follow
            // each other.
            let separator = if self.documents > 0 { "---\n" } else { "" };
            write!(io.out, "{separator}{text}")
        } else {
            writeln!(io.out, "{text}")
        };
        written.map_err(CliError::output)?;
        self.documents += 1;
        Ok(())
    }

    fn ensure_header(&mut self) {
        if !self.header {
            self.header = true;
            self.table.row(print::header(self.columns, self.watching));
        }
    }

    fn flush(&mut self, out: &mut dyn Write) -> Result<(), CliError> {
        if self.format == OutputFormat::Table {
            self.ensure_header();
        }
        self.table.flush(out).map_err(CliError::output)?;
        out.flush().map_err(CliError::output)
    }

    fn finish(&mut self, out: &mut dyn Write) -> Result<(), CliError> {
        self.flush(out)
    }
}
