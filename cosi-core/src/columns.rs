//! Print columns evaluated: the cells a resource shows in a table, as text. Table renderers (the
//! [`table`](crate::table) module behind the `table` feature, a CLI's streaming output) share
//! this, so every tool prints a resource the same way.
//!
//! A print column is a path into the spec in dynamic form: `.` is the whole spec, `.a.b` the field
//! `b` of the field `a`, `.list[0].c` the field `c` of the first item of `list`; a field name is
//! everything up to the next `.` or `[`. A path that leads nowhere renders as an empty cell; strings
//! render as they are, numbers and booleans in their JSON form, lists and maps as compact JSON.
//! Control characters (a newline in a string) are escaped so every resource stays on one line;
//! so is every character [`shown_escaped`](crate::text::shown_escaped), in the cells and in the
//! header's column names alike.

use crate::text::escape_for_terminal;
use crate::{AnyResource, Error, ResourceDefinition, Result};

/// One step of a print column path.
#[derive(Debug, PartialEq)]
enum Step<'p> {
    Field(&'p str),
    Index(usize),
}

/// Parses a print column path; the message says what is wrong.
fn parse_path(path: &str) -> std::result::Result<Vec<Step<'_>>, String> {
    // A definition from a remote node may hold any text here.
    let shown = crate::text::clipped(path);
    let Some(mut rest) = path.strip_prefix('.') else {
        return Err(format!("path {shown:?} must start with '.'"));
    };
    let mut steps = Vec::new();
    // `.` alone is the whole spec; otherwise the leading dot introduces the first field or index.
    let mut expect_field = !rest.is_empty() && !rest.starts_with('[');
    while !rest.is_empty() || expect_field {
        if expect_field {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            if end == 0 {
                return Err(format!("path {shown:?} has an empty field name"));
            }
            steps.push(Step::Field(&rest[..end]));
            rest = &rest[end..];
            expect_field = false;
        } else if let Some(after) = rest.strip_prefix('.') {
            rest = after;
            expect_field = true;
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(close) = after.find(']') else {
                return Err(format!("path {shown:?} has a '[' without ']'"));
            };
            let index = after[..close].parse::<usize>().map_err(|_| {
                format!(
                    "path {shown:?} has index {:?}, expected a non-negative integer",
                    crate::text::clipped(&after[..close])
                )
            })?;
            steps.push(Step::Index(index));
            rest = &after[close + 1..];
        } else {
            // Unreachable in practice: a field always ends at '.', '[' or the end.
            return Err(format!(
                "path {shown:?} is malformed at {:?}",
                crate::text::clipped(rest)
            ));
        }
    }
    Ok(steps)
}

/// Checks that a print column path parses; the message says what is wrong.
pub(crate) fn check_path(path: &str) -> std::result::Result<(), String> {
    parse_path(path).map(drop)
}

fn lookup<'v>(value: &'v serde_json::Value, steps: &[Step<'_>]) -> Option<&'v serde_json::Value> {
    steps.iter().try_fold(value, |value, step| match step {
        Step::Field(name) => value.get(name),
        Step::Index(index) => value.get(index),
    })
}

fn cell(value: Option<&serde_json::Value>) -> String {
    let text = match value {
        None | Some(serde_json::Value::Null) => return String::new(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    match escape_for_terminal(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(escaped) => escaped,
    }
}

/// The columns of one definition, ready to turn resources into rows: `NAMESPACE TYPE ID
/// VERSION` and the definition's print columns.
///
/// ```
/// use cosi_core::{Columns, Resource, ResourceDefinition, ResourceSpec};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
/// struct Service { image: String }
/// impl ResourceSpec for Service {
///     const TYPE: &'static str = "Services.runtime.cosi.dev";
///     const DEFAULT_NAMESPACE: &'static str = "runtime";
///     fn definition() -> ResourceDefinition {
///         ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE).with_print_column("Image", ".image")
///     }
/// }
/// let definition = Service::definition();
/// let columns = Columns::new(&definition)?;
/// assert_eq!(columns.header(), ["NAMESPACE", "TYPE", "ID", "VERSION", "Image"]);
/// let etcd = Resource::new("etcd", Service { image: "etcd:3.5".into() });
/// assert_eq!(columns.row(&etcd)?, ["runtime", "Service", "etcd", "0", "etcd:3.5"]);
/// # Ok::<(), cosi_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Columns<'d> {
    definition: &'d ResourceDefinition,
    paths: Vec<Vec<Step<'d>>>,
}

impl<'d> Columns<'d> {
    /// The columns of `definition`; errors when a print column path does not parse.
    pub fn new(definition: &'d ResourceDefinition) -> Result<Self> {
        let paths = definition
            .print_columns
            .iter()
            .enumerate()
            .map(|(i, column)| {
                parse_path(&column.path).map_err(|message| {
                    Error::invalid(
                        definition.resource_type.as_str(),
                        format!("printColumns[{i}].path"),
                        message,
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Columns { definition, paths })
    }

    /// The header row.
    pub fn header(&self) -> Vec<String> {
        let mut header = vec![
            "NAMESPACE".to_string(),
            "TYPE".to_string(),
            "ID".to_string(),
            "VERSION".to_string(),
        ];
        header.extend(
            self.definition
                .print_columns
                .iter()
                // A remote node's definition is outside input like its resources.
                .map(|c| escape_for_terminal(&c.name).into_owned()),
        );
        header
    }

    /// The row of one resource; errors when it is of another type or its spec cannot be put in
    /// dynamic form.
    pub fn row(&self, resource: &dyn AnyResource) -> Result<Vec<String>> {
        let definition = self.definition;
        let metadata = resource.metadata();
        if metadata.resource_type() != definition.resource_type {
            return Err(Error::invalid(
                metadata.pointer().to_string(),
                "metadata.type",
                format!(
                    "a table of {} cannot show a {}",
                    crate::text::clipped(&definition.resource_type),
                    crate::text::clipped(metadata.resource_type())
                ),
            ));
        }
        let spec = if self.paths.is_empty() {
            serde_json::Value::Null
        } else {
            resource.spec_value()?
        };
        let mut row = vec![
            cell(Some(&metadata.namespace().into())),
            escape_for_terminal(&definition.display_type()).into_owned(),
            cell(Some(&metadata.id().into())),
            metadata.version().to_string(),
        ];
        row.extend(self.paths.iter().map(|steps| cell(lookup(&spec, steps))));
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_parse_into_fields_and_indexes() {
        assert_eq!(parse_path(".").unwrap(), vec![]);
        assert_eq!(
            parse_path(".list[0].c").unwrap(),
            vec![Step::Field("list"), Step::Index(0), Step::Field("c")]
        );
        assert_eq!(
            parse_path(".[2][3]").unwrap(),
            vec![Step::Index(2), Step::Index(3)]
        );
    }

    #[test]
    fn malformed_paths_are_rejected_with_the_reason() {
        assert_eq!(
            parse_path("a").unwrap_err(),
            "path \"a\" must start with '.'"
        );
        assert_eq!(
            parse_path(".a..b").unwrap_err(),
            "path \".a..b\" has an empty field name"
        );
        assert_eq!(
            parse_path(".a.").unwrap_err(),
            "path \".a.\" has an empty field name"
        );
        assert_eq!(
            parse_path(".a[x]").unwrap_err(),
            "path \".a[x]\" has index \"x\", expected a non-negative integer"
        );
        assert_eq!(
            parse_path(".a[1").unwrap_err(),
            "path \".a[1\" has a '[' without ']'"
        );
    }

    #[test]
    fn every_header_name_and_cell_is_escaped() {
        // A definition as a remote node publishes it: names are not checked by `Columns`.
        let definition = ResourceDefinition::new("Evil\u{1b}]0;t\u{7}s.x.dev", "ns")
            .with_print_column("Im\u{1b}[2Jage\u{202e}", ".image");
        let columns = Columns::new(&definition).unwrap();
        assert_eq!(
            columns.header(),
            [
                "NAMESPACE",
                "TYPE",
                "ID",
                "VERSION",
                "Im\\u{1b}[2Jage\\u{202e}"
            ]
        );
        let resource = crate::DynamicResource {
            metadata: crate::Metadata::new(crate::Pointer::new(
                "ns",
                "Evil\u{1b}]0;t\u{7}s.x.dev",
                "a",
            )),
            spec: json!({"image": "x"}),
        };
        assert_eq!(
            columns.row(&resource).unwrap(),
            ["ns", "Evil\\u{1b}]0;t\\u{7}", "a", "0", "x"]
        );
    }

    #[test]
    fn missing_values_render_empty_and_structures_as_json() {
        let spec = json!({"a": {"b": [1, {"c": "x\ny"}]}, "n": null});
        let at = |p: &str| cell(lookup(&spec, &parse_path(p).unwrap()));
        assert_eq!(at(".a.b[1].c"), "x\\ny");
        assert_eq!(at(".a.b[0]"), "1");
        assert_eq!(at(".a.b[5]"), "");
        assert_eq!(at(".n"), "");
        assert_eq!(at(".a.missing.deeper"), "");
        assert_eq!(at(".a.b"), r#"[1,{"c":"x\ny"}]"#);
    }
}
