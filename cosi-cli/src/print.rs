//! How resources and times look in the output: a resource as talosctl prints it in YAML (`node:`
//! first, `event:` when watching, then `metadata` and `spec`) or JSON (the same keys, one object
//! per resource), table rows from a definition's print columns, and ages (`19m27s`).
//!
//! Neither format writes a control character raw, so a node's values cannot steer the
//! terminal: YAML writes them as escapes in double-quoted scalars (`"\e[2J"`, `"\x9B"`), and
//! JSON as `\u` escapes — serde_json escapes only C0, so this module adds DEL and C1
//! (`\u009b`, a one-character CSI to terminals that read C1 controls).

use std::time::{Duration, SystemTime};

use cosi_core::{dynamic, AnyResource, Columns, Error};
use serde::Serialize;

use crate::yaml;

#[derive(Serialize)]
struct Printed<'r> {
    node: &'r str,
    #[serde(skip_serializing_if = "Option::is_none")]
    event: Option<&'r str>,
    #[serde(flatten)]
    document: dynamic::Document<'r>,
}

fn printed<'r>(
    node: &'r str,
    event: Option<&'r str>,
    resource: &'r dyn AnyResource,
) -> Result<Printed<'r>, Error> {
    Ok(Printed {
        node,
        event,
        document: dynamic::document(resource)?,
    })
}

fn write_error(resource: &dyn AnyResource, format: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid(
        resource.metadata().pointer().to_string(),
        "document",
        format!("cannot be written as {format}: {e}"),
    )
}

/// The resource as one YAML document (no `---`), `node:` first, then `event:` if given.
///
/// ```
/// use cosi_core::{DynamicResource, Metadata, Pointer};
/// let r = DynamicResource {
///     metadata: Metadata::new(Pointer::new("ns", "Notes.test.cosi.dev", "n1")),
///     spec: serde_json::json!({"text": "hi"}),
/// };
/// let text = cosi_cli::print::resource_yaml("10.0.0.1", Some("created"), &r).unwrap();
/// assert!(text.starts_with("node: 10.0.0.1\nevent: created\nmetadata:\n  namespace: ns\n"));
/// assert!(text.ends_with("spec:\n  text: hi\n"));
/// ```
pub fn resource_yaml(
    node: &str,
    event: Option<&str>,
    resource: &dyn AnyResource,
) -> Result<String, Error> {
    yaml::to_string(&printed(node, event, resource)?).map_err(|e| write_error(resource, "YAML", e))
}

/// The resource as one pretty JSON object, `node` first, then `event` if given; every control
/// character in it is a `\u` escape.
///
/// ```
/// use cosi_core::{DynamicResource, Metadata, Pointer};
/// let r = DynamicResource {
///     metadata: Metadata::new(Pointer::new("ns", "Notes.test.cosi.dev", "n1")),
///     spec: serde_json::json!({"text": "\u{9b}2J\u{1b}"}),
/// };
/// let text = cosi_cli::print::resource_json("10.0.0.1", None, &r).unwrap();
/// assert!(text.ends_with("\"spec\": {\n    \"text\": \"\\u009b2J\\u001b\"\n  }\n}"));
/// ```
pub fn resource_json(
    node: &str,
    event: Option<&str>,
    resource: &dyn AnyResource,
) -> Result<String, Error> {
    let mut text = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut text, TerminalSafe::default());
    printed(node, event, resource)?
        .serialize(&mut serializer)
        .map_err(|e| write_error(resource, "JSON", e))?;
    // serde_json writes UTF-8 only (strings in, escapes and ASCII punctuation added).
    String::from_utf8(text).map_err(|e| write_error(resource, "JSON", e))
}

/// serde_json's pretty format, with DEL and the C1 controls (which serde_json writes raw) as
/// `\u` escapes too.
#[derive(Default)]
struct TerminalSafe(serde_json::ser::PrettyFormatter<'static>);

/// The pretty formatter's layout, passed on unchanged.
macro_rules! pretty {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $name<W: ?Sized + std::io::Write>(
            &mut self,
            writer: &mut W,
            $($arg: $ty),*
        ) -> std::io::Result<()> {
            self.0.$name(writer, $($arg),*)
        }
    )*};
}

impl serde_json::ser::Formatter for TerminalSafe {
    pretty! {
        begin_array();
        end_array();
        begin_array_value(first: bool);
        end_array_value();
        begin_object();
        end_object();
        begin_object_key(first: bool);
        begin_object_value();
        end_object_value();
    }

    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        // serde_json has escaped C0, `"` and `\` already: the fragments hold the rest.
        let mut start = 0;
        for (at, c) in fragment.char_indices().filter(|(_, c)| c.is_control()) {
            writer.write_all(&fragment.as_bytes()[start..at])?;
            write!(writer, "\\u{:04x}", u32::from(c))?;
            start = at + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

/// The table header of a definition's columns, `NODE` first (and `*` when watching): the
/// print column names upper-cased, as talosctl shows them.
pub fn header(columns: &Columns<'_>, watching: bool) -> Vec<String> {
    let mut header = vec!["NODE".to_string()];
    if watching {
        header.push("*".to_string());
    }
    header.extend(columns.header().into_iter().map(|h| h.to_uppercase()));
    header
}

/// A table row: the node, the watch marker if any, then the definition's cells.
pub fn row(
    columns: &Columns<'_>,
    node: &str,
    marker: Option<&str>,
    resource: &dyn AnyResource,
) -> Result<Vec<String>, Error> {
    let mut row = vec![node.to_string()];
    row.extend(marker.map(str::to_string));
    row.extend(columns.row(resource)?);
    Ok(row)
}

/// How long ago `then` was, rounded down to the second, as Go prints durations (`0s`, `42s`,
/// `19m27s`, `2h0m5s`); a time in the future counts as now.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// let now = UNIX_EPOCH + Duration::from_secs(10_000);
/// assert_eq!(cosi_cli::print::age(now, now - Duration::from_secs(1167)), "19m27s");
/// assert_eq!(cosi_cli::print::age(now, now - Duration::from_secs(7205)), "2h0m5s");
/// assert_eq!(cosi_cli::print::age(now, now + Duration::from_secs(3)), "0s");
/// ```
pub fn age(now: SystemTime, then: SystemTime) -> String {
    let secs = now.duration_since(then).unwrap_or(Duration::ZERO).as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}
