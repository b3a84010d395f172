//! The dependency graph: controllers and resource types as nodes, inputs and outputs as edges.
//!
//! It owns the wiring rules (unique names, one writer per exclusive type, no type both
//! exclusive and shared, no duplicate inputs or outputs; the engine adds its reserved name and
//! type, see `status`) and the exports (Graphviz DOT and a text
//! listing). It knows nothing about running controllers.

use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::sync::Arc;

use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences};
use petgraph::Direction;

use crate::{Input, Output, OutputKind};

/// Why a controller (or a change of its inputs) was rejected.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistrationError {
    /// Another controller already has this name.
    #[error("controller {name:?} is already registered")]
    DuplicateName {
        /// The name both controllers use.
        name: String,
    },
    /// The type is already an exclusive output of another controller.
    #[error(
        "controller {controller:?} cannot output {resource_type}: it is an exclusive output of controller {existing:?}"
    )]
    ExclusiveOutputTaken {
        /// The contested type.
        resource_type: String,
        /// The controller that writes it exclusively.
        existing: String,
        /// The controller being registered.
        controller: String,
    },
    /// One controller declares the type exclusive, another shared.
    #[error(
        "controller {controller:?} declares {resource_type} as a {kind} output, but controller {existing:?} declares it {existing_kind}"
    )]
    MixedOutputKinds {
        /// The contested type.
        resource_type: String,
        /// A controller that already writes it.
        existing: String,
        /// How that controller declares it.
        existing_kind: OutputKind,
        /// The controller being registered.
        controller: String,
        /// How the new controller declares it.
        kind: OutputKind,
    },
    /// The controller declares the same input (kind and id) twice.
    #[error("controller {controller:?} declares input {input} twice")]
    DuplicateInput {
        /// The controller.
        controller: String,
        /// The repeated input (`namespace/type` or `namespace/type/id`).
        input: String,
    },
    /// The controller declares the same output type twice.
    #[error("controller {controller:?} declares output {resource_type} twice")]
    DuplicateOutput {
        /// The controller.
        controller: String,
        /// The repeated type.
        resource_type: String,
    },
    /// No controller of this name is registered.
    #[error("controller {name:?} is not registered")]
    UnknownController {
        /// The name looked up.
        name: String,
    },
    /// The name is the engine's own: its status publisher writes as this owner.
    #[error(
        "controller {name:?} cannot be registered: the engine publishes controller statuses as owner {name:?}, so the name is reserved; register the controller under another name"
    )]
    ReservedName {
        /// The reserved name the controller asked for.
        name: String,
    },
    /// The type is written by the engine itself.
    #[error(
        "controller {controller:?} cannot output {resource_type}: the engine publishes that type (as owner {owner:?}); publish what the controller reports under a type of its own"
    )]
    ReservedOutput {
        /// The controller being registered.
        controller: String,
        /// The reserved type.
        resource_type: String,
        /// The engine's owner name for it.
        owner: String,
    },
}

impl From<RegistrationError> for cosi_core::Error {
    fn from(e: RegistrationError) -> Self {
        let (subject, field) = match &e {
            RegistrationError::DuplicateName { name } => (name.clone(), "name"),
            RegistrationError::ExclusiveOutputTaken { controller, .. }
            | RegistrationError::MixedOutputKinds { controller, .. }
            | RegistrationError::DuplicateOutput { controller, .. } => {
                (controller.clone(), "outputs")
            }
            RegistrationError::DuplicateInput { controller, .. } => (controller.clone(), "inputs"),
            RegistrationError::UnknownController { name }
            | RegistrationError::ReservedName { name } => (name.clone(), "name"),
            RegistrationError::ReservedOutput { controller, .. } => (controller.clone(), "outputs"),
        };
        cosi_core::Error::invalid(subject, field, e.to_string())
    }
}

#[derive(Clone, Debug)]
enum Node {
    Controller(Arc<str>),
    ResourceType(Arc<str>),
}

#[derive(Clone, Debug)]
enum Edge {
    Input(Input),
    Output(OutputKind),
}

/// Controllers and resource types wired by their inputs and outputs.
///
/// ```
/// use cosi_controllers::{DependencyGraph, Input, Output, RegistrationError};
/// use cosi_core::Kind;
///
/// let mut graph = DependencyGraph::default();
/// let a = Kind::new("ns", "As.test.cosi.dev");
/// graph.add_controller("C1", &[Input::weak(a.clone())], &[Output::exclusive("Bs.test.cosi.dev")])?;
/// let err = graph
///     .add_controller("C2", &[], &[Output::exclusive("Bs.test.cosi.dev")])
///     .unwrap_err();
/// assert!(matches!(err, RegistrationError::ExclusiveOutputTaken { .. }));
/// assert!(graph.to_text().contains("C1"));
/// # Ok::<(), RegistrationError>(())
/// ```
#[derive(Default, Debug, Clone)]
pub struct DependencyGraph {
    graph: StableDiGraph<Node, Edge>,
    controllers: HashMap<Arc<str>, NodeIndex>,
    types: HashMap<Arc<str>, NodeIndex>,
}

impl DependencyGraph {
    /// Adds a controller after checking every registration rule; on error nothing changes.
    pub fn add_controller(
        &mut self,
        name: &str,
        inputs: &[Input],
        outputs: &[Output],
    ) -> Result<(), RegistrationError> {
        if self.controllers.contains_key(name) {
            return Err(RegistrationError::DuplicateName { name: name.into() });
        }
        check_inputs(name, inputs)?;
        let mut seen = HashSet::new();
        for output in outputs {
            if !seen.insert(&output.resource_type) {
                return Err(RegistrationError::DuplicateOutput {
                    controller: name.into(),
                    resource_type: output.resource_type.to_string(),
                });
            }
            self.check_output(name, output)?;
        }
        let name: Arc<str> = name.into();
        let node = self.graph.add_node(Node::Controller(name.clone()));
        self.controllers.insert(name, node);
        for output in outputs {
            let ty = self.type_node(&output.resource_type);
            self.graph.add_edge(node, ty, Edge::Output(output.kind));
        }
        self.link_inputs(node, inputs);
        Ok(())
    }

    /// Replaces a controller's inputs; on error nothing changes.
    pub fn set_inputs(&mut self, name: &str, inputs: &[Input]) -> Result<(), RegistrationError> {
        let node = *self
            .controllers
            .get(name)
            .ok_or_else(|| RegistrationError::UnknownController { name: name.into() })?;
        check_inputs(name, inputs)?;
        let old: Vec<_> = self
            .graph
            .edges_directed(node, Direction::Incoming)
            .map(|e| e.id())
            .collect();
        for edge in old {
            self.graph.remove_edge(edge);
        }
        self.link_inputs(node, inputs);
        Ok(())
    }

    /// Removes a controller (its type nodes stay).
    pub fn remove_controller(&mut self, name: &str) -> Result<(), RegistrationError> {
        let node = self
            .controllers
            .remove(name)
            .ok_or_else(|| RegistrationError::UnknownController { name: name.into() })?;
        self.graph.remove_node(node);
        Ok(())
    }

    /// The registered controller names, sorted.
    pub fn controllers(&self) -> Vec<Arc<str>> {
        let mut names: Vec<_> = self.controllers.keys().cloned().collect();
        names.sort();
        names
    }

    /// A controller's inputs, in a stable order (`None` if unknown).
    pub fn inputs(&self, name: &str) -> Option<Vec<Input>> {
        let node = *self.controllers.get(name)?;
        let mut inputs: Vec<Input> = self
            .graph
            .edges_directed(node, Direction::Incoming)
            .filter_map(|e| match e.weight() {
                Edge::Input(input) => Some(input.clone()),
                Edge::Output(_) => None,
            })
            .collect();
        inputs.sort_by(|a, b| (&a.kind, &a.id).cmp(&(&b.kind, &b.id)));
        Some(inputs)
    }

    /// A controller's outputs, sorted by type (`None` if unknown).
    pub fn outputs(&self, name: &str) -> Option<Vec<Output>> {
        let node = *self.controllers.get(name)?;
        let mut outputs: Vec<Output> = self
            .graph
            .edges_directed(node, Direction::Outgoing)
            .filter_map(|e| match (e.weight(), &self.graph[e.target()]) {
                (Edge::Output(kind), Node::ResourceType(ty)) => Some(Output {
                    resource_type: ty.clone(),
                    kind: *kind,
                }),
                _ => None,
            })
            .collect();
        outputs.sort_by(|a, b| a.resource_type.cmp(&b.resource_type));
        Some(outputs)
    }

    /// The graph in Graphviz DOT: controllers are boxes, resource types ellipses, inputs dashed
    /// edges labelled with namespace, id and strength, outputs solid edges labelled with their
    /// kind.
    ///
    /// ```
    /// use cosi_controllers::{DependencyGraph, Input, Output};
    /// use cosi_core::Kind;
    /// let mut graph = DependencyGraph::default();
    /// graph
    ///     .add_controller("C1", &[Input::weak(Kind::new("ns", "As.t.dev"))], &[Output::exclusive("Bs.t.dev")])
    ///     .unwrap();
    /// assert_eq!(
    ///     graph.to_dot(),
    ///     "digraph controllers {\n  \"C1\" [shape=box];\n  \"As.t.dev\" [shape=ellipse];\n  \
    ///      \"Bs.t.dev\" [shape=ellipse];\n  \"As.t.dev\" -> \"C1\" [style=dashed, label=\"ns weak\"];\n  \
    ///      \"C1\" -> \"Bs.t.dev\" [label=\"exclusive\"];\n}\n"
    /// );
    /// ```
    pub fn to_dot(&self) -> String {
        let mut out = String::from("digraph controllers {\n");
        for name in self.controllers() {
            let _ = writeln!(out, "  {} [shape=box];", quote(&name));
        }
        for ty in self.sorted_types() {
            let _ = writeln!(out, "  {} [shape=ellipse];", quote(&ty));
        }
        for (from, to, edge) in self.sorted_edges() {
            match edge {
                Edge::Input(input) => {
                    let mut label = input.kind.namespace().to_string();
                    if let Some(id) = &input.id {
                        let _ = write!(label, "/{id}");
                    }
                    let _ = write!(label, " {}", input.strength);
                    let _ = writeln!(
                        out,
                        "  {} -> {} [style=dashed, label={}];",
                        quote(&from),
                        quote(&to),
                        quote(&label)
                    );
                }
                Edge::Output(kind) => {
                    let _ = writeln!(
                        out,
                        "  {} -> {} [label={}];",
                        quote(&from),
                        quote(&to),
                        quote(&kind.to_string())
                    );
                }
            }
        }
        out.push_str("}\n");
        out
    }

    /// A readable listing: one block per controller with its inputs and outputs.
    ///
    /// ```
    /// use cosi_controllers::{DependencyGraph, Input, Output};
    /// use cosi_core::Kind;
    /// let mut graph = DependencyGraph::default();
    /// graph
    ///     .add_controller("C1", &[Input::strong(Kind::new("ns", "As.t.dev"))], &[Output::shared("Bs.t.dev")])
    ///     .unwrap();
    /// assert_eq!(
    ///     graph.to_text(),
    ///     "C1\n  input  ns/As.t.dev (strong)\n  output Bs.t.dev (shared)\n"
    /// );
    /// ```
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for name in self.controllers() {
            let _ = writeln!(out, "{name}");
            for input in self.inputs(&name).unwrap_or_default() {
                let _ = writeln!(out, "  input  {input}");
            }
            for output in self.outputs(&name).unwrap_or_default() {
                let _ = writeln!(out, "  output {output}");
            }
        }
        out
    }

    fn check_output(&self, name: &str, output: &Output) -> Result<(), RegistrationError> {
        let Some(&ty) = self.types.get(&output.resource_type) else {
            return Ok(());
        };
        let mut writers: Vec<(Arc<str>, OutputKind)> = self
            .graph
            .edges_directed(ty, Direction::Incoming)
            .filter_map(|e| match (e.weight(), &self.graph[e.source()]) {
                (Edge::Output(kind), Node::Controller(c)) => Some((c.clone(), *kind)),
                _ => None,
            })
            .collect();
        writers.sort();
        let Some((existing, existing_kind)) = writers.into_iter().next() else {
            return Ok(());
        };
        match (existing_kind, output.kind) {
            (OutputKind::Exclusive, OutputKind::Exclusive) => {
                Err(RegistrationError::ExclusiveOutputTaken {
                    resource_type: output.resource_type.to_string(),
                    existing: existing.to_string(),
                    controller: name.into(),
                })
            }
            (OutputKind::Shared, OutputKind::Shared) => Ok(()),
            (existing_kind, kind) => Err(RegistrationError::MixedOutputKinds {
                resource_type: output.resource_type.to_string(),
                existing: existing.to_string(),
                existing_kind,
                controller: name.into(),
                kind,
            }),
        }
    }

    fn type_node(&mut self, resource_type: &Arc<str>) -> NodeIndex {
        if let Some(&node) = self.types.get(resource_type) {
            return node;
        }
        let node = self
            .graph
            .add_node(Node::ResourceType(resource_type.clone()));
        self.types.insert(resource_type.clone(), node);
        node
    }

    fn link_inputs(&mut self, node: NodeIndex, inputs: &[Input]) {
        for input in inputs {
            let ty: Arc<str> = input.kind.resource_type().into();
            let ty = self.type_node(&ty);
            self.graph.add_edge(ty, node, Edge::Input(input.clone()));
        }
    }

    fn sorted_types(&self) -> Vec<Arc<str>> {
        let mut types: Vec<_> = self.types.keys().cloned().collect();
        types.sort();
        types
    }

    fn sorted_edges(&self) -> Vec<(Arc<str>, Arc<str>, Edge)> {
        let name = |n: NodeIndex| match &self.graph[n] {
            Node::Controller(c) | Node::ResourceType(c) => c.clone(),
        };
        let mut edges: Vec<_> = self
            .graph
            .edge_references()
            .map(|e| (name(e.source()), name(e.target()), e.weight().clone()))
            .collect();
        edges.sort_by(|a, b| {
            let key = |e: &(Arc<str>, Arc<str>, Edge)| match &e.2 {
                Edge::Input(i) => (0, e.0.clone(), e.1.clone(), i.to_string()),
                Edge::Output(_) => (1, e.0.clone(), e.1.clone(), String::new()),
            };
            key(a).cmp(&key(b))
        });
        edges
    }
}

impl fmt::Display for DependencyGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

fn check_inputs(name: &str, inputs: &[Input]) -> Result<(), RegistrationError> {
    let mut seen = HashSet::new();
    for input in inputs {
        if !seen.insert((&input.kind, &input.id)) {
            let shown = match &input.id {
                Some(id) => format!("{}/{id}", input.kind),
                None => input.kind.to_string(),
            };
            return Err(RegistrationError::DuplicateInput {
                controller: name.into(),
                input: shown,
            });
        }
    }
    Ok(())
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use cosi_core::Kind;

    use super::*;

    fn kind(ty: &str) -> Kind {
        Kind::new("ns", ty)
    }

    #[test]
    fn duplicate_name_is_rejected() {
        let mut g = DependencyGraph::default();
        g.add_controller("C", &[], &[]).unwrap();
        let err = g.add_controller("C", &[], &[]).unwrap_err();
        assert_eq!(err, RegistrationError::DuplicateName { name: "C".into() });
        assert_eq!(err.to_string(), "controller \"C\" is already registered");
    }

    #[test]
    fn second_exclusive_writer_is_rejected_naming_both_and_the_type() {
        let mut g = DependencyGraph::default();
        g.add_controller("A", &[], &[Output::exclusive("T")])
            .unwrap();
        let err = g
            .add_controller("B", &[], &[Output::exclusive("T")])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "controller \"B\" cannot output T: it is an exclusive output of controller \"A\""
        );
        assert_eq!(g.controllers(), vec![Arc::from("A")]);
    }

    #[test]
    fn shared_after_exclusive_is_rejected() {
        let mut g = DependencyGraph::default();
        g.add_controller("A", &[], &[Output::exclusive("T")])
            .unwrap();
        let err = g
            .add_controller("B", &[], &[Output::shared("T")])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "controller \"B\" declares T as a shared output, but controller \"A\" declares it exclusive"
        );
    }

    #[test]
    fn exclusive_after_shared_is_rejected() {
        let mut g = DependencyGraph::default();
        g.add_controller("A", &[], &[Output::shared("T")]).unwrap();
        g.add_controller("B", &[], &[Output::shared("T")]).unwrap();
        let err = g
            .add_controller("C", &[], &[Output::exclusive("T")])
            .unwrap_err();
        assert!(matches!(
            err,
            RegistrationError::MixedOutputKinds { ref existing, ref controller, .. }
                if existing == "A" && controller == "C"
        ));
    }

    #[test]
    fn duplicate_input_is_rejected_even_with_another_strength() {
        let mut g = DependencyGraph::default();
        let err = g
            .add_controller(
                "A",
                &[Input::weak(kind("T")), Input::strong(kind("T"))],
                &[],
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "controller \"A\" declares input ns/T twice"
        );
        assert!(g.controllers().is_empty());
    }

    #[test]
    fn same_kind_with_different_ids_is_two_inputs() {
        let mut g = DependencyGraph::default();
        g.add_controller(
            "A",
            &[
                Input::weak(kind("T")).with_id("1"),
                Input::weak(kind("T")).with_id("2"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(g.inputs("A").unwrap().len(), 2);
    }

    #[test]
    fn duplicate_output_is_rejected() {
        let mut g = DependencyGraph::default();
        let err = g
            .add_controller("A", &[], &[Output::shared("T"), Output::shared("T")])
            .unwrap_err();
        assert!(matches!(err, RegistrationError::DuplicateOutput { .. }));
    }

    #[test]
    fn set_inputs_replaces_inputs_and_rejects_duplicates_without_change() {
        let mut g = DependencyGraph::default();
        g.add_controller("A", &[Input::weak(kind("X"))], &[])
            .unwrap();
        g.set_inputs("A", &[Input::strong(kind("Y"))]).unwrap();
        assert_eq!(g.inputs("A").unwrap(), vec![Input::strong(kind("Y"))]);
        let err = g
            .set_inputs("A", &[Input::weak(kind("Z")), Input::weak(kind("Z"))])
            .unwrap_err();
        assert!(matches!(err, RegistrationError::DuplicateInput { .. }));
        assert_eq!(g.inputs("A").unwrap(), vec![Input::strong(kind("Y"))]);
    }

    #[test]
    fn text_listing_shows_every_controller_with_inputs_and_outputs() {
        let mut g = DependencyGraph::default();
        g.add_controller("C2", &[Input::weak(kind("B"))], &[Output::exclusive("C")])
            .unwrap();
        g.add_controller(
            "C1",
            &[Input::weak(kind("A")), Input::destroy_ready(kind("B"))],
            &[Output::exclusive("B")],
        )
        .unwrap();
        assert_eq!(
            g.to_text(),
            "C1\n  input  ns/A (weak)\n  input  ns/B (destroy-ready)\n  output B (exclusive)\n\
             C2\n  input  ns/B (weak)\n  output C (exclusive)\n"
        );
    }
}
