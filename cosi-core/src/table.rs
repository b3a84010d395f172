//! Table output: resources of one definition as plain text columns, `NAMESPACE TYPE ID VERSION`
//! followed by the definition's print columns (cells as [`Columns`] makes them).
//!
//! The output has no colours and no borders, columns are separated by three spaces, lines carry
//! no trailing whitespace and end with `\n`: it is stable enough to compare in tests. Behind the
//! `table` feature, so the model crate needs no table renderer unless a tool asks for one.

use comfy_table::{presets, CellAlignment, ContentArrangement, Table};

use crate::{AnyResource, Columns, ResourceDefinition, Result};

/// Renders `resources`, which must all be of `definition`'s type, as a text table.
///
/// Errors when a resource is of another type, when a print column path does not parse or when a
/// spec cannot be put in dynamic form.
///
/// ```
/// use cosi_core::{table, Resource, ResourceDefinition, ResourceSpec, SharedResource};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
/// struct Service { image: String, ports: Vec<u16> }
/// impl ResourceSpec for Service {
///     const TYPE: &'static str = "Services.runtime.cosi.dev";
///     const DEFAULT_NAMESPACE: &'static str = "runtime";
///     fn definition() -> ResourceDefinition {
///         ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
///             .with_print_column("Image", ".image")
///             .with_print_column("First port", ".ports[0]")
///     }
/// }
///
/// let list: Vec<SharedResource> = vec![
///     Resource::new("etcd", Service { image: "etcd:3.5".into(), ports: vec![2379, 2380] }).into_shared(),
///     Resource::new("kubelet", Service { image: "kubelet:1.30".into(), ports: vec![] }).into_shared(),
/// ];
/// let text = table::render(&Service::definition(), &list).unwrap();
/// assert_eq!(text, "\
/// NAMESPACE   TYPE      ID        VERSION   Image          First port
/// runtime     Service   etcd      0         etcd:3.5       2379
/// runtime     Service   kubelet   0         kubelet:1.30
/// ");
/// ```
pub fn render<I>(definition: &ResourceDefinition, resources: I) -> Result<String>
where
    I: IntoIterator,
    I::Item: AsRef<dyn AnyResource>,
{
    let columns = Columns::new(definition)?;

    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    let header = columns.header();
    let width = header.len();
    table.set_header(header);

    for resource in resources {
        table.add_row(columns.row(resource.as_ref())?);
    }
    for i in 0..width {
        if let Some(column) = table.column_mut(i) {
            column.set_padding((0, if i + 1 == width { 0 } else { 3 }));
            column.set_cell_alignment(CellAlignment::Left);
        }
    }

    let mut text = String::new();
    for line in table.lines() {
        text.push_str(line.trim_end());
        text.push('\n');
    }
    Ok(text)
}
