//! Types by name: the definitions a node publishes (`ResourceDefinition`s in namespace `meta`)
//! become a [`Registry`] on the client, so `mc`, `members` or a full type name resolve by the
//! same rules as on the node — without the client knowing any node type.

use std::io::Write;

use cosi_api::auth::{required_role, Role};
use cosi_core::{
    downcast_ref, Kind, ListOptions, Registry, ResourceDefinition, ResourceSpec, Sensitivity, State,
};

use crate::error::CliError;
use crate::nodes::Node;
use crate::session::{Io, Report, Session};
use crate::terminal::message_line;

/// The State method every read of a type goes through (for the role a refusal needs).
const LIST: &str = "/cosi.resource.State/List";

/// The definitions `node` publishes.
pub async fn definitions(node: &Node) -> Result<Vec<ResourceDefinition>, CliError> {
    let kind = ResourceDefinition::definition().kind();
    let listed = node
        .call(
            "list the resource definitions",
            required_role(LIST),
            node.state.list(&kind, &ListOptions::default()),
        )
        .await?;
    Ok(listed
        .iter()
        .filter_map(|r| downcast_ref::<ResourceDefinition>(&**r).ok())
        .map(|r| r.spec.clone())
        .collect())
}

/// A registry of `definitions`. A definition the registry refuses (a node that publishes two
/// types under one name) is left out with a warning naming it, so the others still resolve.
pub fn registry(
    node: &str,
    definitions: Vec<ResourceDefinition>,
    warnings: &mut dyn Write,
) -> Registry {
    let mut registry = Registry::new();
    for definition in definitions {
        // The client's codec always knows the definitions' own type.
        if definition.resource_type == ResourceDefinition::TYPE {
            let _ = registry.register::<ResourceDefinition>();
            continue;
        }
        if let Err(e) = registry.register_definition(definition) {
            let text = format!("node {node} publishes a definition this client cannot use: {e}");
            let _ = writeln!(warnings, "warning: {}", message_line(&text));
        }
    }
    registry
}

/// Finds the type `name` names among `node`'s definitions; the error names the node and the
/// name, and says how to list the types.
pub fn resolve(
    node: &str,
    registry: &Registry,
    name: &str,
) -> Result<ResourceDefinition, CliError> {
    registry.resolve(name).cloned().map_err(|e| {
        CliError::Other(format!(
            "node {node}: {e} (list the types it defines with `cosictl get rd`)"
        ))
    })
}

/// The kind to read: the definition's type in `namespace`, else its default namespace.
pub fn kind(definition: &ResourceDefinition, namespace: Option<&str>) -> Kind {
    Kind::new(
        namespace.unwrap_or(&definition.default_namespace),
        &definition.resource_type,
    )
}

/// The role reading resources of `definition` needs: admin for a sensitive type.
pub fn read_role(definition: &ResourceDefinition) -> Role {
    match definition.sensitivity {
        Sensitivity::Sensitive => Role::Admin,
        Sensitivity::Public => required_role(LIST),
    }
}

/// A type resolved for a command, and the nodes that answered.
#[derive(Debug)]
pub struct Target {
    /// The type's definition.
    pub definition: ResourceDefinition,
    /// The kind to read.
    pub kind: Kind,
    /// The nodes whose definitions could be listed (indexes into the session's nodes).
    pub live: Vec<usize>,
}

/// Lists every node's definitions concurrently, resolves `name` on the first node (in the
/// order named) that answered, and reports each node that did not on its own error line.
/// `None` when no node answered.
pub async fn on_first_node(
    session: &Session,
    name: &str,
    namespace: Option<&str>,
    io: &mut Io<'_>,
    report: &mut Report,
) -> Result<Option<Target>, CliError> {
    let listed = session.each(definitions).await;
    let mut live = Vec::new();
    let mut registry = None;
    for (i, (node, result)) in listed.into_iter().enumerate() {
        match result {
            Ok(definitions) => {
                if registry.is_none() {
                    registry = Some((
                        node.name.clone(),
                        self::registry(&node.name, definitions, io.err),
                    ));
                }
                live.push(i);
            }
            Err(e) => report.fail(io, &e),
        }
    }
    let Some((node, registry)) = registry else {
        return Ok(None);
    };
    let definition = resolve(&node, &registry, name)?;
    let kind = kind(&definition, namespace);
    Ok(Some(Target {
        definition,
        kind,
        live,
    }))
}
