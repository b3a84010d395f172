//! Observability: one tracing span per reconcile, with controller, trigger, duration and
//! outcome.
//!
//! This binary holds a single test on purpose: `tracing` caches per-callsite interest across
//! threads, so a concurrently running test without the capturing subscriber could make the
//! reconcile callsite look uninteresting to it.

mod common;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use cosi_controllers::testing::Harness;
use cosi_controllers::{Backoff, EngineOptions, Transform};
use cosi_core::ResourceSpec;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

type Fields = BTreeMap<String, String>;

#[derive(Default)]
struct SpanFields(Fields);

impl Visit for SpanFields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
}

/// Collects the fields of every closed `reconcile` span.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Fields>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = SpanFields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<SpanFields>() {
                values.record(fields);
            }
        }
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            if span.name() == "reconcile" {
                if let Some(fields) = span.extensions().get::<SpanFields>() {
                    self.0.lock().unwrap().push(fields.0.clone());
                }
            }
        }
    }
}

fn fields(pairs: &[(&str, &str)]) -> Fields {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn every_reconcile_has_a_span_with_controller_trigger_duration_outcome_and_error() {
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let h = Harness::with_options(EngineOptions {
        restart_backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(1)),
        ..EngineOptions::default()
    });
    // The test provokes these failures.
    h.expect_errors("PlusOne");
    h.register(Transform::<A, B>::same_id("PlusOne", |a: &A| {
        Some(B { value: a.value + 1 })
    }))
    .unwrap();
    h.start().await;
    create(&h.state(), "x", A { value: 1 }).await;
    h.settle().await;
    h.faults().fail_nth_write(B::TYPE, 1);
    set(&h.state(), "x", A { value: 2 }).await;
    h.settle().await;
    h.advance(Duration::from_secs(1)).await;

    let spans = capture.0.lock().unwrap().clone();
    let span = |trigger: &str, outcome: &str| {
        fields(&[
            ("controller", "PlusOne"),
            ("trigger", trigger),
            ("duration_us", "0"),
            ("outcome", outcome),
        ])
    };
    assert_eq!(
        spans,
        vec![
            span("start", "done"),
            span("input-changed", "done"),
            fields(&[
                ("controller", "PlusOne"),
                ("trigger", "input-changed"),
                ("duration_us", "0"),
                ("outcome", "error"),
                (
                    "error",
                    "test/Bs.test.cosi.dev/x: backend failure: injected fault: write failed"
                ),
                ("error_kind", "backend"),
            ]),
            span("restart", "done"),
        ]
    );
}
