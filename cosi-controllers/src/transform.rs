//! Generic transforms: one input type mapped to one output type by a function — the shape of
//! most node controllers.
//!
//! [`Transform`] is level-triggered: every reconcile lists the inputs and the outputs it owns
//! and converges the outputs (create, update when the spec differs, tear down when the input
//! went away or is tearing down). [`QueueTransform`] does the same per item, for same-id
//! mappings. Both can hold a finalizer on each input (a strong input) so the input cannot be
//! destroyed before its output is; both declare their output kind as a destroy-ready input to
//! learn when a torn-down output has lost its last finalizer, and neither writes when an output
//! is already what it should be.

use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use cosi_core::{
    downcast_ref, CreateOptions, Error, Kind, ListOptions, Metadata, Phase, Pointer, Resource,
    ResourceSpec, Result, SharedResource, State, StateExt, Version,
};

use crate::{Controller, ControllerState, Input, Output, QueueController, Reconciled};

type MapFn<In, Out> = dyn Fn(&Resource<In>) -> Option<(Arc<str>, Out)> + Send + Sync;

/// Settings shared by both transform flavours.
struct Settings {
    name: Arc<str>,
    input_kind: Kind,
    output_kind: Kind,
    finalizers: bool,
    shared_output: bool,
}

impl Settings {
    fn new<In: ResourceSpec, Out: ResourceSpec>(name: &str) -> Self {
        Settings {
            name: name.into(),
            input_kind: In::kind(),
            output_kind: Out::kind(),
            finalizers: false,
            shared_output: false,
        }
    }

    fn inputs(&self) -> Vec<Input> {
        let input = if self.finalizers {
            Input::strong(self.input_kind.clone())
        } else {
            Input::weak(self.input_kind.clone())
        };
        vec![input, Input::destroy_ready(self.output_kind.clone())]
    }

    fn outputs(&self) -> Vec<Output> {
        let ty = self.output_kind.resource_type();
        vec![if self.shared_output {
            Output::shared(ty)
        } else {
            Output::exclusive(ty)
        }]
    }
}

/// A level-triggered transform controller from `In` to `Out`.
///
/// ```
/// use std::sync::Arc;
/// use cosi_controllers::Transform;
/// use cosi_core::ResourceSpec;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct A { value: i64 }
/// # impl ResourceSpec for A { const TYPE: &'static str = "As.test.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "test"; }
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct B { value: i64 }
/// # impl ResourceSpec for B { const TYPE: &'static str = "Bs.test.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "test"; }
/// // Same id, B = A + 1; skip negative values; hold a finalizer on each A.
/// let plus_one = Transform::<A, B>::same_id("PlusOne", |a: &A| {
///     (a.value >= 0).then(|| B { value: a.value + 1 })
/// })
/// .with_finalizers();
///
/// // Any id: one B per A, named after the value.
/// let by_value = Transform::<A, B>::new("ByValue", |a| {
///     Some((Arc::from(format!("v{}", a.spec.value)), B { value: a.spec.value }))
/// });
/// # let _ = (plus_one, by_value);
/// ```
pub struct Transform<In, Out> {
    settings: Settings,
    map: Arc<MapFn<In, Out>>,
    memo: Vec<Memo>,
    _types: PhantomData<fn(In) -> Out>,
}

impl<In: ResourceSpec, Out: ResourceSpec> Transform<In, Out> {
    /// A transform whose `map` returns the output id and spec for an input, or `None` for no
    /// output. `map` must be a pure function of the input resource: the level-triggered
    /// transform does not call it again for an input whose version, and whose output's
    /// version, did not change since the last reconcile.
    pub fn new(
        name: &str,
        map: impl Fn(&Resource<In>) -> Option<(Arc<str>, Out)> + Send + Sync + 'static,
    ) -> Self {
        Transform {
            settings: Settings::new::<In, Out>(name),
            map: Arc::new(map),
            memo: Vec::new(),
            _types: PhantomData,
        }
    }

    /// A transform whose output has the input's id and a spec computed from the input's spec.
    pub fn same_id(name: &str, map: impl Fn(&In) -> Option<Out> + Send + Sync + 'static) -> Self {
        Self::new(name, move |input: &Resource<In>| {
            map(&input.spec).map(|out| (input.metadata.pointer().shared_id().clone(), out))
        })
    }

    /// Holds a finalizer (the controller's name) on every input with an output, released once
    /// that output is destroyed. The input becomes a strong input.
    pub fn with_finalizers(mut self) -> Self {
        self.settings.finalizers = true;
        self
    }

    /// Reads inputs from `namespace` instead of the default namespace of `In`.
    pub fn input_namespace(mut self, namespace: &str) -> Self {
        self.settings.input_kind = In::kind_in(namespace);
        self
    }

    /// Writes outputs to `namespace` instead of the default namespace of `Out`.
    pub fn output_namespace(mut self, namespace: &str) -> Self {
        self.settings.output_kind = Out::kind_in(namespace);
        self
    }

    /// Declares the output shared instead of exclusive (other controllers write the type too).
    pub fn shared_output(mut self) -> Self {
        self.settings.shared_output = true;
        self
    }

    /// The same transform as a per-item queue controller (requires a same-id mapping: see
    /// [`QueueTransform`]).
    pub fn into_queue(self, concurrency: usize) -> QueueTransform<In, Out> {
        QueueTransform {
            settings: self.settings,
            map: self.map,
            concurrency: concurrency.max(1),
            _types: PhantomData,
        }
    }
}

/// What the last reconcile established for one input: while neither the input nor its output
/// changed version since, the output is known to be right and the map need not run again.
#[derive(Clone)]
struct Memo {
    input_id: Arc<str>,
    input_version: Version,
    output_id: Arc<str>,
    output_version: Version,
}

/// The owned outputs of one reconcile, sorted by id (as `list` returns them), with lookups
/// that are O(1) when ids come in order (same-id mappings) and O(log n) otherwise.
struct Outputs<Out> {
    // Kept type-erased (checked once when collected) so no per-item `Arc` is cloned.
    sorted: Vec<SharedResource>,
    kept: Vec<bool>,
    hint: usize,
    _type: PhantomData<Out>,
}

impl<Out: ResourceSpec> Outputs<Out> {
    fn find(&mut self, id: &str) -> Option<usize> {
        let at = match self.sorted.get(self.hint) {
            Some(o) if o.metadata().id() == id => self.hint,
            _ => self
                .sorted
                .binary_search_by(|o| o.metadata().id().cmp(id))
                .ok()?,
        };
        self.hint = at + 1;
        Some(at)
    }

    fn get(&self, at: usize) -> Result<&Resource<Out>> {
        downcast_ref::<Out>(&*self.sorted[at])
    }
}

#[async_trait]
impl<In: ResourceSpec, Out: ResourceSpec> Controller for Transform<In, Out> {
    fn name(&self) -> &str {
        &self.settings.name
    }

    fn inputs(&self) -> Vec<Input> {
        self.settings.inputs()
    }

    fn outputs(&self) -> Vec<Output> {
        self.settings.outputs()
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let settings = &self.settings;
        let inputs = state
            .list(&settings.input_kind, &ListOptions::default())
            .await?;
        let mut sorted = state
            .list(&settings.output_kind, &ListOptions::default())
            .await?;
        sorted.retain(|o| o.metadata().owner() == Some(&*settings.name));
        for output in &sorted {
            downcast_ref::<Out>(&**output)?;
        }
        let mut outputs = Outputs::<Out> {
            kept: vec![false; sorted.len()],
            sorted,
            hint: 0,
            _type: PhantomData,
        };
        let mut memo = Vec::with_capacity(inputs.len());
        let mut previous = self.memo.iter().peekable();
        for input in &inputs {
            let input = downcast_ref::<In>(&**input)?;
            let id = input.metadata.id();
            while previous.next_if(|m| &*m.input_id < id).is_some() {}
            let running = input.metadata.phase() == Phase::Running;
            if running {
                if let Some(m) = previous.next_if(|m| &*m.input_id == id) {
                    if m.input_version == input.metadata.version() {
                        if let Some(at) = outputs.find(&m.output_id) {
                            let output = outputs.sorted[at].metadata();
                            if output.version() == m.output_version
                                && output.phase() == Phase::Running
                            {
                                outputs.kept[at] = true;
                                memo.push(m.clone());
                                continue;
                            }
                        }
                    }
                }
            }
            let mapped = (self.map)(input);
            match mapped {
                Some((out_id, spec)) if running => {
                    let mut input_version = input.metadata.version();
                    if settings.finalizers {
                        let held = hold_finalizer(state, settings, &input.metadata).await?;
                        // Versions grow by one per write: exactly one more means nobody but us
                        // changed the input since it was listed, so the output computed from
                        // the listed value matches the new version. Otherwise keep the listed
                        // version: the memo misses next time and the map runs again.
                        if held == Some(input_version.next()) {
                            input_version = input_version.next();
                        }
                    }
                    let at = outputs.find(&out_id);
                    let existing = match at {
                        Some(at) => Some(outputs.get(at)?),
                        None => None,
                    };
                    let written =
                        write_output(state, settings, existing, out_id.clone(), spec).await?;
                    if let Some(at) = at {
                        outputs.kept[at] = true;
                    }
                    if let Some(output_version) = written {
                        memo.push(Memo {
                            input_id: input.metadata.pointer().shared_id().clone(),
                            input_version,
                            output_id: out_id,
                            output_version,
                        });
                    }
                }
                Some((out_id, _)) => {
                    // The input is tearing down: its output goes first, then our finalizer.
                    let gone = match outputs.find(&out_id) {
                        Some(at) => {
                            outputs.kept[at] = true;
                            state
                                .teardown_output(outputs.sorted[at].metadata().pointer())
                                .await?
                        }
                        None => true,
                    };
                    if gone && settings.finalizers {
                        release_finalizer(state, settings, &input.metadata).await?;
                    }
                }
                None => {
                    if settings.finalizers {
                        release_finalizer(state, settings, &input.metadata).await?;
                    }
                }
            }
        }
        // Outputs whose input is gone (or maps elsewhere now).
        for (output, kept) in outputs.sorted.iter().zip(&outputs.kept) {
            if !kept {
                state.teardown_output(output.metadata().pointer()).await?;
            }
        }
        self.memo = memo;
        Ok(Reconciled::Done)
    }
}

/// Creates or updates one output, writing nothing when it already has `spec`. Returns the
/// version of the output now in place, or `None` if it is still on its way out.
async fn write_output<Out: ResourceSpec>(
    state: &ControllerState,
    settings: &Settings,
    existing: Option<&Resource<Out>>,
    id: Arc<str>,
    spec: Out,
) -> Result<Option<Version>> {
    match existing {
        Some(output) if output.metadata.phase() == Phase::TearingDown => {
            // A torn-down output cannot come back to life: destroy it (once free) and create
            // it afresh; until then the destroy-ready input wakes us when it is free.
            if state.teardown_output(output.metadata.pointer()).await? {
                return create_output(state, settings, id, spec).await.map(Some);
            }
            Ok(None)
        }
        Some(output) if output.spec == spec => Ok(Some(output.metadata.version())),
        Some(output) => {
            let next = Resource::with_metadata(output.metadata.clone(), spec.clone());
            match state.update(next.into_shared(), state.owned()).await {
                Ok(stored) => Ok(Some(stored.metadata().version())),
                Err(e) if e.is_version_conflict() => {
                    modify_output(state, settings, id, spec).await.map(Some)
                }
                Err(e) => Err(e),
            }
        }
        None => create_output(state, settings, id, spec).await.map(Some),
    }
}

async fn create_output<Out: ResourceSpec>(
    state: &ControllerState,
    settings: &Settings,
    id: Arc<str>,
    spec: Out,
) -> Result<Version> {
    // From the interned output kind: no name lookups per output.
    let pointer = settings.output_kind.pointer(id.clone());
    let fresh = Resource::with_metadata(Metadata::new(pointer), spec.clone());
    let options = CreateOptions {
        owner: Some(settings.name.to_string()),
    };
    match state.create(fresh.into_shared(), options).await {
        Ok(stored) => Ok(stored.metadata().version()),
        Err(e) if e.is_already_exists() => modify_output(state, settings, id, spec).await,
        Err(e) => Err(e),
    }
}

async fn modify_output<Out: ResourceSpec>(
    state: &ControllerState,
    settings: &Settings,
    id: Arc<str>,
    spec: Out,
) -> Result<Version> {
    let template = Resource::with_metadata(
        Metadata::new(settings.output_kind.pointer(id)),
        spec.clone(),
    );
    state
        .modify_output(template, |r| {
            r.spec = spec.clone();
            Ok(())
        })
        .await
        .map(|stored| stored.metadata.version())
}

/// Puts our finalizer on an input; returns the input's new version if it wrote.
async fn hold_finalizer(
    state: &ControllerState,
    settings: &Settings,
    input: &cosi_core::Metadata,
) -> Result<Option<Version>> {
    if input.finalizers().contains(&*settings.name) {
        return Ok(None);
    }
    let stored = state
        .add_finalizer(input.pointer(), &[&settings.name])
        .await?;
    Ok(Some(stored.metadata().version()))
}

async fn release_finalizer(
    state: &ControllerState,
    settings: &Settings,
    input: &cosi_core::Metadata,
) -> Result<()> {
    if input.finalizers().contains(&*settings.name) {
        match state
            .remove_finalizer(input.pointer(), &[&settings.name])
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A transform reconciled per input item: a [`QueueController`] whose primary input is `In`
/// and whose outputs have the id of their input. Build it with [`Transform::into_queue`].
///
/// The mapping must keep the input's id (as [`Transform::same_id`] does): when an input is
/// destroyed, its output is found by id. An output with another id is rejected with
/// `InvalidArgument`.
pub struct QueueTransform<In, Out> {
    settings: Settings,
    map: Arc<MapFn<In, Out>>,
    concurrency: usize,
    _types: PhantomData<fn(In) -> Out>,
}

#[async_trait]
impl<In: ResourceSpec, Out: ResourceSpec> QueueController for QueueTransform<In, Out> {
    fn name(&self) -> &str {
        &self.settings.name
    }

    fn primary(&self) -> Input {
        self.settings.inputs().remove(0)
    }

    fn secondary(&self) -> Vec<Input> {
        vec![Input::destroy_ready(self.settings.output_kind.clone())]
    }

    fn outputs(&self) -> Vec<Output> {
        self.settings.outputs()
    }

    fn concurrency(&self) -> usize {
        self.concurrency
    }

    async fn map_input(
        &self,
        _state: &ControllerState,
        output: &SharedResource,
    ) -> Result<Vec<Pointer>> {
        let id = output.metadata().pointer().shared_id().clone();
        Ok(vec![self.settings.input_kind.pointer(id)])
    }

    async fn reconcile(&self, state: &ControllerState, item: &Pointer) -> Result<Reconciled> {
        let settings = &self.settings;
        let output_pointer = settings.output_kind.pointer(item.shared_id().clone());
        let input = match state.get(item).await {
            Ok(input) => input,
            Err(e) if e.is_not_found() => {
                teardown_owned(state, settings, &output_pointer).await?;
                return Ok(Reconciled::Done);
            }
            Err(e) => return Err(e),
        };
        let input = downcast_ref::<In>(&*input)?;
        let existing = match state.get(&output_pointer).await {
            Ok(o) if o.metadata().owner() == Some(&*settings.name) => Some(o),
            Ok(_) => None,
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let existing = match &existing {
            Some(o) => Some(downcast_ref::<Out>(&**o)?),
            None => None,
        };
        let mapped = (self.map)(input);
        if let Some((id, _)) = &mapped {
            if id != item.shared_id() {
                return Err(Error::invalid(
                    item.to_string(),
                    "id",
                    format!(
                        "a queue transform must keep the input id, but the mapping gave {id:?}"
                    ),
                ));
            }
        }
        match mapped {
            Some((id, spec)) if input.metadata.phase() == Phase::Running => {
                if settings.finalizers {
                    hold_finalizer(state, settings, &input.metadata).await?;
                }
                write_output(state, settings, existing, id, spec).await?;
            }
            _ => {
                let gone = match &existing {
                    Some(output) => state.teardown_output(output.metadata.pointer()).await?,
                    None => true,
                };
                if gone && settings.finalizers {
                    release_finalizer(state, settings, &input.metadata).await?;
                }
            }
        }
        Ok(Reconciled::Done)
    }
}

async fn teardown_owned(
    state: &ControllerState,
    settings: &Settings,
    pointer: &Pointer,
) -> Result<()> {
    match state.get(pointer).await {
        Ok(output) if output.metadata().owner() == Some(&*settings.name) => {
            state.teardown_output(pointer).await.map(drop)
        }
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}
