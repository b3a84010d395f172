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
    downcast, downcast_ref, AnyResource, CreateOptions, Error, Kind, ListOptions, Metadata, Phase,
    Pointer, Resource, ResourceSpec, Result, SharedResource, StateExt,
};

use crate::input_changes::Changed;
use crate::{Controller, ControllerState, Input, Output, QueueController, Reconciled};

type MapFn<In, Out> = dyn Fn(&Resource<In>) -> Option<(Arc<str>, Out)> + Send + Sync;

/// The changed inputs are converged alone while they are at most one in this many of the
/// inputs (measured on W3: with thousands changed per reconcile out of 10,000, the full pass was
/// 1.5× faster than point reads of each).
const CHANGED_SHARE: usize = 16;

/// So few changed inputs are converged alone whatever the number of inputs.
const FEW_CHANGED: usize = 4;

/// Settings shared by both transform flavours.
struct Settings {
    name: Arc<str>,
    input_kind: Kind,
    output_kind: Kind,
    finalizers: bool,
    shared_output: bool,
}

/// Whether the controller `state` serves owns `resource` (wrote it as its output): its outputs
/// share the controller's name, so this compares addresses, not the owner's bytes.
fn owns(state: &ControllerState, resource: &dyn AnyResource) -> bool {
    resource.metadata().has_owner(Some(state.owner()))
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
    memo: Vec<Memo<Out>>,
    /// Whether `memo` is what the last reconcile, which succeeded, established: only then can a
    /// reconcile look at the changed inputs alone.
    memo_complete: bool,
    _types: PhantomData<fn(In) -> Out>,
}

impl<In: ResourceSpec, Out: ResourceSpec> Transform<In, Out> {
    /// A transform whose `map` returns the output id and spec for an input, or `None` for no
    /// output. `map` must be a pure function of the input resource: the level-triggered
    /// transform does not call it again for an input that, like its output, is still the
    /// value stored at the last reconcile.
    pub fn new(
        name: &str,
        map: impl Fn(&Resource<In>) -> Option<(Arc<str>, Out)> + Send + Sync + 'static,
    ) -> Self {
        Transform {
            settings: Settings::new::<In, Out>(name),
            map: Arc::new(map),
            memo: Vec::new(),
            memo_complete: false,
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

/// What the last reconcile established for one input: while the store still holds the very
/// values recorded here, the output is known to be right and the map need not run again.
///
/// Values are compared by identity, not by version: a resource destroyed and created again
/// starts over at version 1, and the store shares one allocation per stored version, which
/// the memo keeps alive (so its address cannot be reused by another value meanwhile).
struct Memo<Out> {
    /// The input's id (the memo is sorted by it, as `list` sorts inputs).
    input_id: Arc<str>,
    /// The input as the output was computed from it (or as our finalizer write left it).
    input: SharedResource,
    output_id: Arc<str>,
    /// The output as this controller last wrote or found it: the store's own value while
    /// nobody changed it since, so keeping it costs no memory.
    output: Arc<Resource<Out>>,
}

/// Whether two handles share one stored value (the data address; vtables may differ between
/// codegen units).
fn same_value<A: ?Sized, B: ?Sized>(a: &Arc<A>, b: &Arc<B>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// Whether two ids are equal, without reading them when they are the same `Arc` (an output's
/// id is usually its input's, and the memo keeps the ids it was built with).
fn same_id(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// The outputs of one reconcile: every resource of the output kind, sorted by id (as `list`
/// returns them), with lookups that are O(1) when ids come in order (same-id mappings) and
/// O(log n) otherwise. Whose they are is read only where it decides something: an output the
/// memo recorded is this controller's by construction, and reading every output's owner on
/// every full pass would touch each one's metadata (two dependent reads) for nothing.
struct Outputs {
    sorted: Vec<SharedResource>,
    kept: Vec<bool>,
    hint: usize,
}

impl Outputs {
    fn find(&mut self, id: &Arc<str>) -> Option<usize> {
        let here = self.sorted.get(self.hint);
        if here.is_some_and(|o| same_id(o.metadata().pointer().shared_id(), id)) {
            self.hint += 1;
            return Some(self.hint - 1);
        }
        // Ids in order meet a missing output (one not created yet) between the hint's
        // neighbours: two comparisons tell, where a search would take log n.
        let after_previous = self
            .hint
            .checked_sub(1)
            .is_none_or(|previous| self.sorted[previous].metadata().id() < &**id);
        if after_previous && here.is_none_or(|o| &**id < o.metadata().id()) {
            return None;
        }
        let at = self
            .sorted
            .binary_search_by(|o| o.metadata().id().cmp(&**id))
            .ok()?;
        self.hint = at + 1;
        Some(at)
    }

    /// The output at the hint if it is `value` itself (the same stored value, compared by
    /// address: nothing is read from it), moving the hint past it.
    fn same_at_hint<T: ?Sized>(&mut self, value: &Arc<T>) -> Option<usize> {
        let at = self.hint;
        let here = self.sorted.get(at)?;
        if !same_value(here, value) {
            return None;
        }
        self.hint += 1;
        Some(at)
    }

    /// The output `id` if `settings`' transform owns it.
    fn find_owned(&mut self, id: &Arc<str>, state: &ControllerState) -> Option<usize> {
        self.find(id).filter(|&at| owns(state, &*self.sorted[at]))
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
        // Taken before anything is read: a change stored from now on is the next reconcile's.
        // More changes than this are answered with a full pass: no need to record them.
        let limit = FEW_CHANGED.max(self.memo.len() / CHANGED_SHARE);
        let changed = state.take_input_changes(limit);
        let complete = std::mem::replace(&mut self.memo_complete, false);
        if let (true, false, Changed::These(changed)) =
            (complete, self.settings.shared_output, changed)
        {
            // A changed input costs two point reads here; the full pass a shared clone and a
            // comparison per input: it is cheaper once more than a few percent changed.
            let few = changed.len() <= FEW_CHANGED
                || changed.len().saturating_mul(CHANGED_SHARE) <= self.memo.len();
            if few && self.reconcile_changed(state, changed).await? {
                self.memo_complete = true;
                return Ok(Reconciled::Done);
            }
        }
        let settings = &self.settings;
        let inputs = state
            .list(&settings.input_kind, &ListOptions::default())
            .await?;
        let listed = state
            .list(&settings.output_kind, &ListOptions::default())
            .await?;
        let mut outputs = Outputs {
            kept: vec![false; listed.len()],
            sorted: listed,
            hint: 0,
        };
        let mut memo = Vec::with_capacity(inputs.len());
        // Both sorted by input id: one merge, no lookups.
        let mut previous = std::mem::take(&mut self.memo).into_iter().peekable();
        for shared in &inputs {
            // The input and its output still the values the memo recorded: decided by address
            // alone, without reading either (a pass over thousands of unchanged inputs then
            // streams through the two lists and the memo instead of touching every resource).
            let unchanged = previous
                .peek()
                .filter(|m| same_value(&m.input, shared))
                .and_then(|m| outputs.same_at_hint(&m.output));
            if let Some(at) = unchanged {
                if let Some(m) = previous.next() {
                    outputs.kept[at] = true;
                    memo.push(m);
                    continue;
                }
            }
            let input = downcast_ref::<In>(&**shared)?;
            let id = input.metadata.pointer().shared_id();
            while previous
                .next_if(|m| !Arc::ptr_eq(&m.input_id, id) && m.input_id < *id)
                .is_some()
            {}
            if let Some(m) = previous.next_if(|m| same_id(&m.input_id, id)) {
                if same_value(&m.input, shared) {
                    if let Some(at) = outputs.find(&m.output_id) {
                        if same_value(&outputs.sorted[at], &m.output) {
                            outputs.kept[at] = true;
                            memo.push(m);
                            continue;
                        }
                    }
                }
            }
            let running = input.metadata.phase() == Phase::Running;
            match (self.map)(input) {
                Some((out_id, spec)) if running => {
                    let existing = match outputs.find_owned(&out_id, state) {
                        Some(at) => {
                            outputs.kept[at] = true;
                            Some(downcast::<Out>(outputs.sorted[at].clone())?)
                        }
                        None => None,
                    };
                    let written =
                        converge(state, settings, &*self.map, shared, existing, out_id, spec)
                            .await?;
                    memo.extend(written);
                }
                Some((out_id, _)) => {
                    // The input is tearing down: its output goes first, then our finalizer.
                    let gone = match outputs.find_owned(&out_id, state) {
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
            if !kept && owns(state, &**output) {
                state.teardown_output(output.metadata().pointer()).await?;
            }
        }
        self.memo = memo;
        self.memo_complete = true;
        Ok(Reconciled::Done)
    }
}

impl<In: ResourceSpec, Out: ResourceSpec> Transform<In, Out> {
    /// Converges the inputs in `changed` alone, keeping the memo sorted and complete: what the
    /// full pass would do for each of them, without listing every input and output. `Ok(false)`
    /// for a change it leaves to the full pass: an output's (one ready to be destroyed), a
    /// destroyed input, or an input whose output moved to another id or went away (the full pass
    /// tears down the outputs no input keeps). Only for exclusive outputs: a shared output may be
    /// kept by another input.
    async fn reconcile_changed(
        &mut self,
        state: &ControllerState,
        mut changed: Vec<Pointer>,
    ) -> Result<bool> {
        let Transform {
            settings,
            map,
            memo,
            ..
        } = self;
        if changed.iter().any(|p| *p.kind() != settings.input_kind) {
            return Ok(false);
        }
        // In id order, as the full pass converges them.
        changed.sort_unstable_by(|a, b| a.id().cmp(b.id()));
        let position =
            |memo: &[Memo<Out>], id: &str| memo.binary_search_by(|m| (*m.input_id).cmp(id));
        for pointer in &changed {
            let shared = match state.get(pointer).await {
                Ok(input) => input,
                Err(e) if e.is_not_found() => {
                    if position(memo, pointer.id()).is_ok() {
                        return Ok(false);
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            let input = downcast_ref::<In>(&*shared)?;
            let at = position(memo, input.metadata.id());
            let recorded = at.ok().map(|at| {
                let m = &memo[at];
                (
                    same_value(&m.input, &shared),
                    m.output_id.clone(),
                    m.output.clone(),
                )
            });
            if let Some((true, output_id, output)) = &recorded {
                if let Some(stored) = owned_output::<Out>(state, settings, output_id).await? {
                    if same_value(&stored, output) {
                        continue;
                    }
                }
            }
            let running = input.metadata.phase() == Phase::Running;
            match map(input) {
                Some((out_id, spec)) if running => {
                    if let Some((_, output_id, _)) = &recorded {
                        if !same_id(output_id, &out_id) {
                            return Ok(false);
                        }
                    }
                    let existing = owned_output::<Out>(state, settings, &out_id).await?;
                    let written =
                        converge(state, settings, &**map, &shared, existing, out_id, spec).await?;
                    match (at, written) {
                        (Ok(at), Some(m)) => memo[at] = m,
                        (Err(at), Some(m)) => memo.insert(at, m),
                        (Ok(at), None) => {
                            memo.remove(at);
                        }
                        (Err(_), None) => {}
                    }
                }
                Some((out_id, _)) => {
                    if let Some((_, output_id, _)) = &recorded {
                        if !same_id(output_id, &out_id) {
                            return Ok(false);
                        }
                    }
                    // The input is tearing down: its output goes first, then our finalizer.
                    let gone = match owned_output::<Out>(state, settings, &out_id).await? {
                        Some(output) => state.teardown_output(output.metadata.pointer()).await?,
                        None => true,
                    };
                    if gone && settings.finalizers {
                        release_finalizer(state, settings, &input.metadata).await?;
                    }
                    if let Ok(at) = at {
                        memo.remove(at);
                    }
                }
                None => {
                    if recorded.is_some() {
                        return Ok(false);
                    }
                    if settings.finalizers {
                        release_finalizer(state, settings, &input.metadata).await?;
                    }
                }
            }
        }
        Ok(true)
    }
}

/// The output `id` if this controller owns it.
async fn owned_output<Out: ResourceSpec>(
    state: &ControllerState,
    settings: &Settings,
    id: &Arc<str>,
) -> Result<Option<Arc<Resource<Out>>>> {
    match state.get(&settings.output_kind.pointer(id.clone())).await {
        Ok(output) if owns(state, &*output) => downcast::<Out>(output).map(Some),
        Ok(_) => Ok(None),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Brings the output of a running input (`shared`, an `In`) to `spec`, holding the input's
/// finalizer first when the transform holds finalizers. Returns the memo of the result, or
/// `None` if the output is still on its way out.
async fn converge<In: ResourceSpec, Out: ResourceSpec>(
    state: &ControllerState,
    settings: &Settings,
    map: &MapFn<In, Out>,
    shared: &SharedResource,
    existing: Option<Arc<Resource<Out>>>,
    out_id: Arc<str>,
    spec: Out,
) -> Result<Option<Memo<Out>>> {
    let input = downcast_ref::<In>(&**shared)?;
    let mut basis = shared.clone();
    if settings.finalizers {
        // Written from exactly the value read, the stored input differs from it only by our
        // finalizer: the output computed here is right for it too, and the next reconcile
        // finds it in the memo. (After a fallback the memo keeps the value read: it misses
        // next time and the map runs again.)
        if let Some(stored) = state.hold_own_finalizer(input).await? {
            basis = stored;
        }
    }
    // Pure map: running it again gives the same spec, for the rare conflict retry.
    let again = || map(input).map(|(_, spec)| spec);
    let written = write_output(state, settings, existing, out_id.clone(), spec, again).await?;
    Ok(written.map(|output| Memo {
        input_id: input.metadata.pointer().shared_id().clone(),
        input: basis,
        output_id: out_id,
        output,
    }))
}

/// Creates or updates one output, writing nothing when it already has `spec`. Returns the
/// output now in place, or `None` if it is still on its way out. `again` gives the spec once
/// more for the rare retry after a conflict (so the first attempt can move `spec` into the
/// write instead of copying it).
async fn write_output<Out: ResourceSpec>(
    state: &ControllerState,
    settings: &Settings,
    existing: Option<Arc<Resource<Out>>>,
    id: Arc<str>,
    spec: Out,
    again: impl FnOnce() -> Option<Out> + Send,
) -> Result<Option<Arc<Resource<Out>>>> {
    let write = match existing {
        Some(output) if output.metadata.phase() == Phase::TearingDown => {
            // A torn-down output cannot come back to life: destroy it (once free) and create
            // it afresh; until then the destroy-ready input wakes us when it is free.
            if !state.teardown_output(output.metadata.pointer()).await? {
                return Ok(None);
            }
            create_output(state, settings, id.clone(), spec).await
        }
        Some(output) if output.spec == spec => return Ok(Some(output)),
        Some(output) => {
            let next = Resource::with_metadata(output.metadata.clone(), spec);
            state.update(next.into_shared(), state.owned()).await
        }
        None => create_output(state, settings, id.clone(), spec).await,
    };
    match write {
        Ok(stored) => downcast::<Out>(stored).map(Some),
        // Someone else wrote it meanwhile (a finalizer, a create): read, change, write.
        Err(e) if e.is_version_conflict() || e.is_already_exists() => {
            let spec = again().ok_or_else(|| {
                Error::invalid(
                    settings.name.to_string(),
                    "map",
                    "the map function gave no output the second time for the same input: it \
                     must be a pure function of the input",
                )
            })?;
            modify_output(state, settings, id, spec).await.map(Some)
        }
        Err(e) => Err(e),
    }
}

async fn create_output<Out: ResourceSpec>(
    state: &ControllerState,
    settings: &Settings,
    id: Arc<str>,
    spec: Out,
) -> Result<SharedResource> {
    // From the interned output kind: no name lookups per output.
    let pointer = settings.output_kind.pointer(id);
    let fresh = Resource::with_metadata(Metadata::new(pointer), spec);
    let options = CreateOptions {
        owner: Some(state.owner().clone()),
    };
    state.create(fresh.into_shared(), options).await
}

async fn modify_output<Out: ResourceSpec>(
    state: &ControllerState,
    settings: &Settings,
    id: Arc<str>,
    spec: Out,
) -> Result<Arc<Resource<Out>>> {
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
        let shared = match state.get(item).await {
            Ok(input) => input,
            Err(e) if e.is_not_found() => {
                let output_pointer = settings.output_kind.pointer(item.shared_id().clone());
                teardown_owned(state, &output_pointer).await?;
                return Ok(Reconciled::Done);
            }
            Err(e) => return Err(e),
        };
        let input = downcast_ref::<In>(&*shared)?;
        // `owned_output`, written out: a reconcile's calls are awaited here directly, not
        // through a nested future each (every level of nesting costs its own state to build,
        // poll and drop, per item).
        let output_pointer = settings.output_kind.pointer(item.shared_id().clone());
        let existing = match state.get(&output_pointer).await {
            Ok(output) if owns(state, &*output) => Some(downcast::<Out>(output)?),
            Ok(_) => None,
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
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
                // What `converge` does, without the memo a level transform keeps (per item
                // there is none): hold our finalizer on the input (called only when it is
                // missing), then bring the output to `spec`.
                if settings.finalizers && !input.metadata.finalizers().contains(&*settings.name) {
                    state.hold_own_finalizer(input).await?;
                }
                // Pure map: running it again gives the same spec, for the rare conflict retry.
                let again = || (self.map)(input).map(|(_, spec)| spec);
                write_output(state, settings, existing, id, spec, again).await?;
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

async fn teardown_owned(state: &ControllerState, pointer: &Pointer) -> Result<()> {
    match state.get(pointer).await {
        Ok(output) if owns(state, &*output) => state.teardown_output(pointer).await.map(drop),
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosi_core::{DynamicResource, Kind, Metadata};
    use proptest::prelude::*;

    fn outputs(ids: &[String]) -> Outputs {
        let kind = Kind::new("ns", "Outputs.test");
        let sorted: Vec<SharedResource> = ids
            .iter()
            .map(|id| {
                let resource = DynamicResource {
                    metadata: Metadata::new(kind.pointer(id.as_str())),
                    spec: serde_json::Value::Null,
                };
                Arc::new(resource) as SharedResource
            })
            .collect();
        Outputs {
            kept: vec![false; sorted.len()],
            sorted,
            hint: 0,
        }
    }

    proptest! {
        /// `find` answers as a search of the sorted outputs would, whether ids come in order
        /// (its fast paths: the hint, a missing output between the hint's neighbours) or not.
        #[test]
        fn an_output_lookup_answers_as_a_search_of_the_sorted_outputs(
            present in proptest::collection::btree_set(0u16..200, 0..60),
            queries in proptest::collection::vec(0u16..200, 0..120),
            in_order in any::<bool>(),
        ) {
            let id = |n: u16| format!("r-{n:04}");
            let ids: Vec<String> = present.iter().map(|&n| id(n)).collect();
            let mut found = outputs(&ids);
            let mut queries = queries;
            if in_order {
                queries.sort_unstable();
            }
            for n in queries {
                let wanted: Arc<str> = id(n).into();
                let expected = ids.binary_search(&id(n)).ok();
                prop_assert_eq!(found.find(&wanted), expected, "id {}", wanted);
            }
        }
    }
}
