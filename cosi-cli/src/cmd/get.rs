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
    let results = futures::future::join_all(nodes.iter().map(|node| async {
        let result = match &args.id {
            Some(id) => node
                .state
                .get(&target.kind.pointer(id.as_str()))
                .await
                .map(|r| vec![r]),
            None => node.state.list(&target.kind, &ListOptions::default()).await,
        };
        result.map_err(|e| CliError::node(&node.name, what.clone(), e, needs))
    }))
    .await;

    let mut printer = Printer::new(args.output, columns, false);
    let mut answered = false;
    for (node, result) in nodes.iter().zip(results) {
        match result {
            Ok(resources) => {
                answered = true;
                for resource in &resources {
                    printer.resource(io.out, &node.name, None, resource)?;
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
    let opened = futures::future::join_all(nodes.iter().map(|node| async {
        node.state
            .watch_kind(&target.kind, options.clone())
            .await
            .map_err(|e| CliError::node(&node.name, what.clone(), e, needs))
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
            printer.event(io.out, node, marker, name, resource)?;
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

fn printing_error(e: cosi_core::Error) -> CliError {
    CliError::Other(format!("cannot print: {e}"))
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

    fn resource(
        &mut self,
        out: &mut dyn Write,
        node: &str,
        event: Option<(&str, &str)>,
        resource: &SharedResource,
    ) -> Result<(), CliError> {
        match self.format {
            OutputFormat::Table => {
                self.ensure_header();
                let row = print::row(self.columns, node, event.map(|(m, _)| m), &**resource)
                    .map_err(printing_error)?;
                self.table.row(row);
            }
            OutputFormat::Yaml => {
                let text = print::resource_yaml(node, event.map(|(_, n)| n), &**resource)
                    .map_err(printing_error)?;
                if self.documents > 0 {
                    writeln!(out, "---").map_err(CliError::output)?;
                }
                write!(out, "{text}").map_err(CliError::output)?;
                self.documents += 1;
            }
            OutputFormat::Json => {
                let text = print::resource_json(node, event.map(|(_, n)| n), &**resource)
                    .map_err(printing_error)?;
                writeln!(out, "{text}").map_err(CliError::output)?;
                self.documents += 1;
            }
        }
        Ok(())
    }

    fn event(
        &mut self,
        out: &mut dyn Write,
        node: &str,
        marker: &str,
        name: &str,
        resource: &SharedResource,
    ) -> Result<(), CliError> {
        self.resource(out, node, Some((marker, name)), resource)
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
