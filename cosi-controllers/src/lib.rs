//! # cosi-controllers
//!
//! The controller runtime: controllers declare inputs and outputs, the engine wires them into a
//! dependency graph and runs level-triggered reconciles.
