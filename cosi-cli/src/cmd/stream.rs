//! `logs` and `events`: streams from every node at once, printed as they arrive until they end
//! or the operator interrupts. With several nodes, each log line is prefixed `<node>: `.
//!
//! The deadline of a call (`--request-timeout`) bounds the opening of a stream that goes on
//! until interrupted (`logs -f`, `events`); `logs` without `-f` ends by itself, so it is one
//! call and the deadline bounds it to its end.

use cosi_api::auth::required_role;
use cosi_api::machine::{EventTail, LogRequest, MachineEvent, MachineEventPayload};
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use crate::args::{EventsArgs, LogsArgs};
use crate::error::CliError;
use crate::session::{Io, Report, Session};
use crate::table::TabWriter;

/// The longest partial line kept per node while waiting for its end (longer ones are printed
/// in pieces), so a node that never sends a newline cannot grow the client's memory.
pub const MAX_LINE: usize = 64 * 1024;

/// Merges per-node streams and hands each item to `each` until every stream ended or `stop`.
async fn drain<T, S>(
    io: &mut Io<'_>,
    streams: Vec<S>,
    mut each: impl FnMut(&mut Io<'_>, usize, Option<T>) -> Result<(), CliError>,
) -> Result<(), CliError>
where
    S: Stream<Item = T> + Unpin,
{
    let count = streams.len();
    let tagged = streams.into_iter().enumerate().map(|(i, stream)| {
        // Each stream ends with a `None` of its own, so its partial line can be flushed.
        stream
            .map(move |item| (i, Some(item)))
            .chain(futures::stream::iter([(i, None)]))
            .boxed_local()
    });
    let mut merged = futures::stream::select_all(tagged);
    let mut ended = 0;
    while ended < count {
        let next = tokio::select! {
            _ = &mut io.stop => return Ok(()),
            next = merged.next() => next,
        };
        let Some((i, item)) = next else { break };
        if item.is_none() {
            ended += 1;
        }
        each(io, i, item)?;
    }
    Ok(())
}

/// The streams that opened, with their nodes' names; each node that failed is reported.
fn split_opened<S>(
    opened: Vec<(&crate::nodes::Node, Result<S, CliError>)>,
    io: &mut Io<'_>,
    report: &mut Report,
) -> (Vec<String>, Vec<std::pin::Pin<Box<S>>>) {
    let mut names = Vec::new();
    let mut streams = Vec::new();
    for (node, result) in opened {
        match result {
            Ok(stream) => {
                names.push(node.name.clone());
                streams.push(Box::pin(stream));
            }
            Err(e) => report.fail(io, &e),
        }
    }
    (names, streams)
}

/// `stream`, cut at `deadline` if it has not ended by then: its last item is then `late()`.
/// Items that arrived by the deadline come first.
fn ending_by<S: Stream + Unpin>(
    stream: S,
    deadline: Instant,
    late: impl FnOnce() -> S::Item,
) -> impl Stream<Item = S::Item> {
    let cut = Box::pin(tokio::time::sleep_until(deadline));
    futures::stream::unfold(Some((stream, cut, late)), |state| async move {
        let (mut stream, mut cut, late) = state?;
        tokio::select! {
            biased;
            item = stream.next() => item.map(|item| (item, Some((stream, cut, late)))),
            () = &mut cut => Some((late(), None)),
        }
    })
}

/// Runs `logs`.
pub async fn logs(session: &Session, args: &LogsArgs, io: &mut Io<'_>) -> Result<Report, CliError> {
    let service = args.service.as_str();
    let what = format!("logs {service}");
    let needs = required_role("/cosi.machine.MachineService/Logs");
    let started = Instant::now();
    let opened = session
        .each(|node| {
            let what = &what;
            async move {
                let request = LogRequest {
                    service: service.to_string(),
                    tail: args.tail,
                    follow: args.follow,
                };
                let lines = node
                    .call(what.clone(), needs, node.machine.logs(request))
                    .await?
                    .map(move |item| {
                        item.map_err(|e| CliError::node(&node.name, what.clone(), e, needs))
                    })
                    .boxed_local();
                // A deadline past what the clock counts is none (as tokio's timeout has it).
                let end = node
                    .deadline
                    .and_then(|deadline| Some((deadline, started.checked_add(deadline)?)));
                Ok(match end {
                    // Without -f the log ends by itself: one call, bounded to its end.
                    Some((deadline, end)) if !args.follow => ending_by(lines, end, move || {
                        Err(CliError::Deadline {
                            node: node.name.clone(),
                            what: what.clone(),
                            deadline,
                            started: true,
                        })
                    })
                    .boxed_local(),
                    _ => lines,
                })
            }
        })
        .await;
    let mut report = Report::default();
    let (names, streams) = split_opened(opened, io, &mut report);
    let prefix = session.prefixed();
    let mut partial: Vec<Vec<u8>> = vec![Vec::new(); names.len()];
    let mut failures = Vec::new();
    drain(io, streams, |io, i, item| {
        let line_out = |io: &mut Io<'_>, bytes: &[u8]| -> Result<(), CliError> {
            let text = String::from_utf8_lossy(bytes);
            let text = text.strip_suffix('\n').unwrap_or(&text);
            if prefix {
                writeln!(io.out, "{}: {text}", names[i]).map_err(CliError::output)
            } else {
                writeln!(io.out, "{text}").map_err(CliError::output)
            }
        };
        match item {
            Some(Ok(chunk)) => {
                partial[i].extend_from_slice(&chunk);
                while let Some(end) = partial[i].iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = partial[i].drain(..=end).collect();
                    line_out(io, &line)?;
                }
                if partial[i].len() > MAX_LINE {
                    let piece = std::mem::take(&mut partial[i]);
                    line_out(io, &piece)?;
                }
                io.out.flush().map_err(CliError::output)
            }
            Some(Err(e)) => {
                failures.push(e);
                Ok(())
            }
            None => {
                if !partial[i].is_empty() {
                    let rest = std::mem::take(&mut partial[i]);
                    line_out(io, &rest)?;
                }
                Ok(())
            }
        }
    })
    .await?;
    for failure in failures {
        report.fail(io, &failure);
    }
    Ok(report)
}

fn event_row(node: &str, event: &MachineEvent) -> [String; 5] {
    let (kind, source, message) = match &event.payload {
        MachineEventPayload::Service {
            service,
            state,
            message,
        } => ("service", service.clone(), format!("{state}: {message}")),
        // The message names the mode (`try by admin: ...`, `rollback by node: ...`); the wire's
        // mode is the API's apply mode, which has no name for what the node did by itself.
        MachineEventPayload::Config {
            version, message, ..
        } => ("config", format!("version {version}"), message.clone()),
    };
    [
        node.to_string(),
        event.id.clone(),
        kind.to_string(),
        source,
        message,
    ]
}

/// Runs `events`: past events (`--tail`), then new ones until interrupted.
pub async fn events(
    session: &Session,
    args: &EventsArgs,
    io: &mut Io<'_>,
) -> Result<Report, CliError> {
    let tail = match args.tail {
        0 => EventTail::None,
        n if n < 0 => EventTail::All,
        n => EventTail::Last(usize::try_from(n).unwrap_or(usize::MAX)),
    };
    let opened = session
        .each(|node| {
            node.call(
                "events",
                required_role("/cosi.machine.MachineService/Events"),
                node.machine.events(tail),
            )
        })
        .await;
    let mut report = Report::default();
    let (names, streams) = split_opened(opened, io, &mut report);
    if streams.is_empty() {
        return Ok(report);
    }
    let mut table = TabWriter::default();
    // The header goes out with the first event, aligned with it.
    table.row(["NODE", "ID", "EVENT", "SOURCE", "MESSAGE"]);
    let mut failures = Vec::new();
    drain(io, streams, |io, i, item| match item {
        Some(Ok(event)) => {
            table.row(event_row(&names[i], &event));
            table.flush(io.out).map_err(CliError::output)
        }
        Some(Err(e)) => {
            failures.push(CliError::node(
                &names[i],
                "events",
                e,
                required_role("/cosi.machine.MachineService/Events"),
            ));
            Ok(())
        }
        None => Ok(()),
    })
    .await?;
    table.flush(io.out).map_err(CliError::output)?;
    for failure in failures {
        report.fail(io, &failure);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use tokio::time::Instant;

    use super::ending_by;

    #[tokio::test(start_paused = true)]
    async fn a_stream_still_open_at_its_deadline_ends_with_the_late_item_after_what_came() {
        let stream = futures::stream::iter([1, 2]).chain(futures::stream::pending());
        let deadline = Instant::now() + Duration::from_millis(300);
        // On the paused clock a guard of an hour costs nothing, and fails a stream never cut.
        let items = ending_by(stream, deadline, || -1).collect::<Vec<i32>>();
        let items = tokio::time::timeout(Duration::from_secs(3600), items)
            .await
            .expect("the stream ends at its deadline");
        assert_eq!(items, [1, 2, -1]);
        assert_eq!(Instant::now(), deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_ends_before_its_deadline_ends_as_it_is() {
        let deadline = Instant::now() + Duration::from_millis(300);
        let items: Vec<i32> = ending_by(futures::stream::iter([1, 2]), deadline, || -1)
            .collect()
            .await;
        assert_eq!(items, [1, 2]);
    }
}
