//! Written below.
