//! # cosi-controllers
//!
//! The controller runtime: controllers declare inputs and outputs, the engine wires them into a
//! dependency graph and runs level-triggered reconciles.

mod access;
mod backoff;
mod catch_panic;
mod controller;
mod engine;
mod feed;
mod graph;
mod level;
mod queue;
mod status;
mod transform;
mod wake;
mod work_queue;

pub use access::{Cleanup, ControllerState};
pub use backoff::Backoff;
pub use controller::{Controller, Input, InputStrength, Output, OutputKind, Reconciled};
pub use engine::{Engine, EngineOptions, ShutdownReport};
pub use graph::{DependencyGraph, RegistrationError};
pub use queue::QueueController;
pub use status::{ControllerStatus, STATUS_OWNER};
pub use transform::{QueueTransform, Transform};
pub mod testing;
