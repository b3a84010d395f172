//! The one apply entry point: every change of the machine config goes through
//! [`ConfigApplier::apply`], and the node's start goes through [`load_at_start`].
//!
//! # An apply, in order
//!
//! 1. One apply at a time: a second concurrent one fails with [`ApplyError::InProgress`].
//! 2. The **base** is read: the `persisted` config for `staged` (so staged changes add up),
//!    the `active` one for every other mode (falling back to the other id when one is absent).
//!    An expected version that is not the base's version is an [`ApplyError::VersionConflict`].
//! 3. The new config is the given text (kept as written), or the base with the patches applied
//!    in order (canonical text; when the patches change nothing, the base's text is kept). It
//!    is decoded strictly and [validated](super::validate); any error rejects the apply with
//!    every problem and its path ([`ApplyError::Invalid`]).
//! 4. The mode is resolved against the **active** config (see [`super::restart`] for which
//!    fields need a restart):
//!
//!    | mode        | only live fields changed          | a restart field changed               |
//!    |-------------|-----------------------------------|---------------------------------------|
//!    | `no-reboot` | persisted + active                | refused: [`ApplyError::RestartRequired`] |
//!    | `auto`      | as `no-reboot`                    | as `reboot` (resolved mode `reboot`)  |
//!    | `reboot`    | persisted, then [`NodeRuntime::restart`] | persisted, then restart        |
//!    | `staged`    | persisted only                    | persisted only                        |
//!    | `try`       | active only, rolled back later    | refused: [`ApplyError::RestartRequired`] |
//!
//!    With no active config yet (a node in maintenance), nothing runs that a change could need
//!    a restart for: every field counts as live. `try` needs an active config to roll back to.
//! 5. A **dry run** stops here and returns the resolved mode, the merged config, the diff and
//!    the validation result: it writes nothing and cancels nothing (not even a pending try).
//! 6. Otherwise the writes happen (persisted first, then active; an unchanged config is not
//!    written), a [`ConfigHistory`](super::ConfigHistory) entry is recorded, and:
//!    - any successful non-try apply **confirms a pending try**: its rollback is cancelled;
//!    - `try` arms a rollback after the timeout (default [`DEFAULT_TRY_TIMEOUT`]) on tokio's
//!      clock. A **second try during a pending one** replaces the tried config and restarts
//!      the timer with its own timeout, but keeps the rollback target: the config that was
//!      active before the first try, so a rollback always returns to a confirmed config;
//!    - a restart also reverts a try: `try` never writes `persisted`, and [`load_at_start`]
//!      makes `persisted` active.
//!
//! A rejected apply writes nothing: every check happens before the first write.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use cosi_core::{
    downcast, Error, Pointer, Resource, SharedResource, State, StateExt, UpdateOptions, Version,
};
use tokio::sync::{Semaphore, TryAcquireError};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::diff::ConfigDiff;
use super::document;
use super::error::{ConfigErrors, FieldError};
use super::history::{self, Change};
use super::patch::{self, Patch};
use super::resources::{MachineConfig, ACTIVE, PERSISTED};
use super::restart::{restart_fields, NodeRuntime, RestartRequest};
use super::validate::{validate, Validation};

/// How long a `try` apply stays before it is rolled back, unless the request says otherwise.
pub const DEFAULT_TRY_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest `try` timeout accepted: a try is a trial, rolled back unless confirmed; a config
/// meant to stay is applied with `no-reboot`.
pub const MAX_TRY_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// The most patches one apply takes.
pub const MAX_PATCHES: usize = 64;

/// The actor the history names for changes the node makes by itself.
pub const NODE_ACTOR: &str = "node";

/// How an apply takes effect (see the module docs for the table).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum ApplyMode {
    /// Live when possible, otherwise persist and restart.
    Auto,
    /// Live; refused when a field needs a restart.
    NoReboot,
    /// Persist, then restart the node runtime.
    Reboot,
    /// Persist only; active at the next start.
    Staged,
    /// Active only, rolled back after a timeout unless confirmed.
    Try,
}

impl ApplyMode {
    /// Every mode.
    pub const ALL: [ApplyMode; 5] = [
        ApplyMode::Auto,
        ApplyMode::NoReboot,
        ApplyMode::Reboot,
        ApplyMode::Staged,
        ApplyMode::Try,
    ];

    /// The name operators type: `auto`, `no-reboot`, `reboot`, `staged`, `try`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyMode::Auto => "auto",
            ApplyMode::NoReboot => "no-reboot",
            ApplyMode::Reboot => "reboot",
            ApplyMode::Staged => "staged",
            ApplyMode::Try => "try",
        }
    }
}

impl std::fmt::Display for ApplyMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ApplyMode {
    type Err = Error;

    /// ```
    /// use cosi_node::config::apply::ApplyMode;
    /// assert_eq!("no-reboot".parse::<ApplyMode>().unwrap(), ApplyMode::NoReboot);
    /// assert_eq!(
    ///     "fast".parse::<ApplyMode>().unwrap_err().to_string(),
    ///     "MachineConfig: invalid mode: \"fast\" is not a mode (auto, no-reboot, reboot, staged, try)"
    /// );
    /// ```
    fn from_str(text: &str) -> Result<Self, Error> {
        ApplyMode::ALL
            .into_iter()
            .find(|m| m.as_str() == text)
            .ok_or_else(|| {
                Error::invalid(
                    super::MACHINE_CONFIG_SUBJECT,
                    "mode",
                    format!("{text:?} is not a mode (auto, no-reboot, reboot, staged, try)"),
                )
            })
    }
}

/// What an apply starts from.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ApplyInput {
    /// A whole config (multi-document YAML), stored as written.
    Config(Vec<u8>),
    /// Patches applied in order to the base config (strategic-merge YAML or RFC 6902 JSON
    /// each; see [`super::patch`]), at most [`MAX_PATCHES`], each at most
    /// [`super::document::MAX_CONFIG_BYTES`]. Reading `@file` arguments is the client's business.
    Patches(Vec<Vec<u8>>),
}

/// One apply.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ApplyRequest {
    /// The config or the patches.
    pub input: ApplyInput,
    /// How it takes effect.
    pub mode: ApplyMode,
    /// Only report what would happen.
    pub dry_run: bool,
    /// `try` only: how long until the rollback (default [`DEFAULT_TRY_TIMEOUT`]).
    pub try_timeout: Option<Duration>,
    /// The version of the base config the input was computed from (edit, patch); another
    /// stored version is a conflict.
    pub expected_version: Option<Version>,
    /// Who applies it (recorded in the history).
    pub actor: String,
}

impl ApplyRequest {
    /// A whole config in `mode`, by actor `actor`.
    pub fn config(text: impl Into<Vec<u8>>, mode: ApplyMode, actor: &str) -> Self {
        Self::new(ApplyInput::Config(text.into()), mode, actor)
    }

    /// Patches in `mode`, by actor `actor`.
    pub fn patches<P: Into<Vec<u8>>>(
        patches: impl IntoIterator<Item = P>,
        mode: ApplyMode,
        actor: &str,
    ) -> Self {
        let patches = patches.into_iter().map(Into::into).collect();
        Self::new(ApplyInput::Patches(patches), mode, actor)
    }

    fn new(input: ApplyInput, mode: ApplyMode, actor: &str) -> Self {
        ApplyRequest {
            input,
            mode,
            dry_run: false,
            try_timeout: None,
            expected_version: None,
            actor: actor.to_string(),
        }
    }

    /// The same request as a dry run.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// The same request with a try timeout.
    pub fn try_timeout(mut self, timeout: Duration) -> Self {
        self.try_timeout = Some(timeout);
        self
    }

    /// The same request expecting the base config at `version`.
    pub fn expect_version(mut self, version: Version) -> Self {
        self.expected_version = Some(version);
        self
    }
}

/// What an apply did (or, for a dry run, would do).
#[derive(Clone, PartialEq, Debug)]
pub struct ApplyOutcome {
    /// The mode it took effect in (`auto` resolves to `no-reboot` or `reboot`).
    pub mode: ApplyMode,
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// What it did, in words (for a dry run: the summary and the diff).
    pub details: String,
    /// Validation warnings.
    pub warnings: Vec<FieldError>,
    /// The whole validation result (errors are always empty in an outcome).
    pub validation: Validation,
    /// From the base config to the new one.
    pub diff: ConfigDiff,
    /// The changed fields that need a restart.
    pub restart_fields: Vec<String>,
    /// The new config's text (merged, for patches).
    pub config: String,
    /// The active config's version now.
    pub active_version: Option<Version>,
    /// The persisted config's version now.
    pub persisted_version: Option<Version>,
}

/// Why an apply was refused. Nothing was written.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// The config or a patch is wrong; every problem with its field path.
    #[error("{}", .0.to_invalid_argument())]
    Invalid(ConfigErrors),
    /// The mode cannot apply a change that needs a restart.
    #[error("MachineConfig: invalid {}: mode {mode} cannot apply this change without a restart (use auto, reboot or staged)", fields.join(", "))]
    RestartRequired {
        /// The requested mode.
        mode: ApplyMode,
        /// The changed fields that need the restart.
        fields: Vec<String>,
    },
    /// Another apply is running.
    #[error("MachineConfig: another apply is in progress")]
    InProgress,
    /// The applier was closed: the node runtime it belongs to is stopping (see
    /// [`ConfigApplier::close`]).
    #[error("MachineConfig: the node runtime is restarting or stopping; apply again once it runs")]
    Closed,
    /// The base config is not at the expected version.
    #[error("{pointer}: version conflict: expected {expected}, stored {}", actual.map_or("none".to_string(), |v| v.to_string()))]
    VersionConflict {
        /// The base config.
        pointer: Pointer,
        /// The version the request expected.
        expected: Version,
        /// The stored version (none: no config).
        actual: Option<Version>,
    },
    /// The state failed.
    #[error(transparent)]
    State(#[from] Error),
}

impl ApplyError {
    /// Whether trying again later (after re-reading, for a conflict) can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ApplyError::InProgress | ApplyError::Closed | ApplyError::VersionConflict { .. } => {
                true
            }
            ApplyError::State(e) => e.is_retryable(),
            _ => false,
        }
    }

    /// The runtime's error for this refusal (what the API maps to a status): invalid input
    /// and restart refusals are invalid-argument errors with the field paths; a conflict is a
    /// version conflict; "in progress" and "closed" are retryable backend errors.
    pub fn to_state_error(&self) -> Error {
        match self {
            ApplyError::Invalid(errors) => errors.to_invalid_argument(),
            ApplyError::RestartRequired { fields, .. } => Error::invalid(
                super::MACHINE_CONFIG_SUBJECT,
                fields.join(", "),
                self.to_string(),
            ),
            ApplyError::InProgress => Error::Backend {
                subject: super::MACHINE_CONFIG_SUBJECT.into(),
                message: "another apply is in progress".into(),
                retryable: true,
                source: None,
            },
            ApplyError::Closed => Error::Backend {
                subject: super::MACHINE_CONFIG_SUBJECT.into(),
                message: "the node runtime is restarting or stopping; apply again once it runs"
                    .into(),
                retryable: true,
                source: None,
            },
            ApplyError::VersionConflict {
                pointer,
                expected,
                actual,
            } => Error::VersionConflict {
                pointer: pointer.clone(),
                expected: *expected,
                actual: actual.unwrap_or(Version::new(0)),
            },
            ApplyError::State(e) => e.clone(),
        }
    }
}

/// A try waiting for its rollback.
#[derive(Debug)]
struct PendingTry {
    id: u64,
    /// The active config before the first try of a series.
    rollback_to: MachineConfig,
    deadline: Instant,
    timer: JoinHandle<()>,
}

/// What [`ConfigApplier::pending_try`] reports.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PendingTryInfo {
    /// When the rollback happens (tokio clock).
    pub deadline: Instant,
}

struct Inner {
    state: Arc<dyn State>,
    runtime: Arc<dyn NodeRuntime>,
    /// One permit: one apply (or rollback) at a time. A semaphore, not a lock, because the
    /// holder awaits state calls.
    applying: Semaphore,
    pending: Mutex<Option<PendingTry>>,
    next_try: std::sync::atomic::AtomicU64,
}

/// Applies machine configs over any [`State`] (the daemon routes namespace `config` to the
/// disk backend). Cheap to clone; clones share the one-at-a-time rule and the pending try.
///
/// ```
/// use std::sync::Arc;
/// use cosi_node::config::apply::{ApplyMode, ApplyRequest, ConfigApplier};
/// use cosi_node::config::restart::RestartSignal;
/// use cosi_state::MemoryState;
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let (signal, _restarts) = RestartSignal::new();
/// let applier = ConfigApplier::new(Arc::new(MemoryState::default()), Arc::new(signal));
/// let config = "version: v1alpha1
/// machine: {type: worker, token: t0k3n}
/// cluster: {name: demo, controlPlane: {endpoint: 'https://192.0.2.1:6443'}}
/// ";
/// let outcome = applier
///     .apply(ApplyRequest::config(config, ApplyMode::Auto, "admin"))
///     .await
///     .unwrap();
/// assert_eq!(outcome.mode, ApplyMode::NoReboot);
/// assert_eq!(outcome.active_version.unwrap().get(), 1);
///
/// let labelled = applier
///     .apply(ApplyRequest::patches(["machine: {nodeLabels: {zone: a}}"], ApplyMode::NoReboot, "admin"))
///     .await
///     .unwrap();
/// assert_eq!(labelled.diff.changed, ["machine.nodeLabels"]);
/// # });
/// ```
#[derive(Clone)]
pub struct ConfigApplier {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ConfigApplier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigApplier")
            .field("pending_try", &self.pending_try())
            .finish_non_exhaustive()
    }
}

/// The two stored configs.
struct Stored {
    active: Option<Arc<Resource<MachineConfig>>>,
    persisted: Option<Arc<Resource<MachineConfig>>>,
}

impl ConfigApplier {
    /// An applier writing to `state` and asking `runtime` for restarts.
    pub fn new(state: Arc<dyn State>, runtime: Arc<dyn NodeRuntime>) -> Self {
        ConfigApplier {
            inner: Arc::new(Inner {
                state,
                runtime,
                applying: Semaphore::new(1),
                pending: Mutex::new(None),
                next_try: std::sync::atomic::AtomicU64::new(1),
            }),
        }
    }

    /// The pending try, if one waits for its rollback.
    pub fn pending_try(&self) -> Option<PendingTryInfo> {
        lock(&self.inner.pending).as_ref().map(|p| PendingTryInfo {
            deadline: p.deadline,
        })
    }

    /// Applies a config or patches. See the module docs for every rule.
    pub async fn apply(&self, request: ApplyRequest) -> Result<ApplyOutcome, ApplyError> {
        let _permit = self.inner.applying.try_acquire().map_err(|e| match e {
            TryAcquireError::Closed => ApplyError::Closed,
            TryAcquireError::NoPermits => ApplyError::InProgress,
        })?;
        let state = &*self.inner.state;
        let stored = read_stored(state).await?;

        let (base_id, base) = match request.mode {
            ApplyMode::Staged => (
                PERSISTED,
                stored.persisted.as_ref().or(stored.active.as_ref()),
            ),
            _ => (ACTIVE, stored.active.as_ref().or(stored.persisted.as_ref())),
        };
        if let Some(expected) = request.expected_version {
            let actual = base.map(|b| b.metadata.version());
            if actual != Some(expected) {
                let pointer = base.map_or_else(
                    || MachineConfig::pointer(base_id),
                    |b| b.metadata.pointer().clone(),
                );
                return Err(ApplyError::VersionConflict {
                    pointer,
                    expected,
                    actual,
                });
            }
        }

        let new = new_config(&request.input, base.map(|b| &b.spec))?;
        let validation = validate(new.config());
        if !validation.is_ok() {
            return Err(ApplyError::Invalid(ConfigErrors(validation.errors)));
        }

        let active = stored.active.as_ref().map(|a| a.spec.config());
        let restart = match active {
            Some(active) => {
                restart_fields(&ConfigDiff::between(Some(active), new.config()).changed)
            }
            None => Vec::new(),
        };
        let mode = match request.mode {
            ApplyMode::NoReboot | ApplyMode::Try if !restart.is_empty() => {
                return Err(ApplyError::RestartRequired {
                    mode: request.mode,
                    fields: restart,
                })
            }
            ApplyMode::Try if stored.active.is_none() => {
                return Err(ApplyError::Invalid(ConfigErrors::one(
                    "mode",
                    "try needs an active config to roll back to; apply the first config with no-reboot",
                )))
            }
            ApplyMode::Auto if restart.is_empty() => ApplyMode::NoReboot,
            ApplyMode::Auto => ApplyMode::Reboot,
            other => other,
        };
        let diff = ConfigDiff::between(base.map(|b| b.spec.config()), new.config());
        let timeout = request.try_timeout.unwrap_or(DEFAULT_TRY_TIMEOUT);
        if mode == ApplyMode::Try && timeout > MAX_TRY_TIMEOUT {
            return Err(ApplyError::Invalid(ConfigErrors::one(
                "try_timeout",
                format!(
                    "{timeout:?} is longer than the {MAX_TRY_TIMEOUT:?} a try may last; to keep a \
                     config, apply it with no-reboot"
                ),
            )));
        }
        let mut outcome = ApplyOutcome {
            mode,
            dry_run: request.dry_run,
            details: String::new(),
            warnings: validation.warnings.clone(),
            validation,
            diff,
            restart_fields: restart,
            config: new.text().to_string(),
            active_version: stored.active.as_ref().map(|a| a.metadata.version()),
            persisted_version: stored.persisted.as_ref().map(|p| p.metadata.version()),
        };
        let effect = effect_in_words(mode, &outcome.restart_fields, timeout);

        if request.dry_run {
            let diff = if outcome.diff.unified.is_empty() {
                "No changes.".to_string()
            } else {
                format!("Config diff:\n\n{}", outcome.diff.unified)
            };
            outcome.details = format!("Dry run summary:\n{effect} (skipped in dry-run).\n{diff}");
            return Ok(outcome);
        }

        let mut words = vec![effect];
        let before = (outcome.active_version, outcome.persisted_version);
        let at = SystemTime::now();
        if matches!(
            mode,
            ApplyMode::NoReboot | ApplyMode::Reboot | ApplyMode::Staged
        ) {
            let written = write(state, PERSISTED, &new).await?;
            outcome.persisted_version = Some(written.metadata.version());
        }
        if matches!(mode, ApplyMode::NoReboot | ApplyMode::Try) {
            if mode == ApplyMode::Try {
                // Invariant: checked above, try is refused without an active config.
                let current = stored.active.as_ref().expect("try has an active config");
                self.arm_rollback(current.spec.clone(), timeout);
            }
            let written = write(state, ACTIVE, &new).await?;
            outcome.active_version = Some(written.metadata.version());
        }
        // After the writes: a rollback waiting for our permit finds its try gone.
        if mode != ApplyMode::Try && self.cancel_pending_try() {
            words.push("The pending 'try' config is confirmed: its rollback is cancelled.".into());
        }
        if before == (outcome.active_version, outcome.persisted_version) {
            words.push("No changes: the config was already in place.".into());
        } else {
            history::record(
                state,
                Change {
                    mode: mode.as_str(),
                    actor: &request.actor,
                    active: outcome.active_version,
                    persisted: outcome.persisted_version,
                    diff: &outcome.diff,
                    at,
                },
            )
            .await?;
        }
        if mode == ApplyMode::Reboot {
            // Invariant: reboot mode wrote the persisted config just above.
            let persisted_version = outcome.persisted_version.expect("reboot persisted");
            self.inner.runtime.restart(RestartRequest {
                persisted_version,
                fields: outcome.restart_fields.clone(),
                actor: request.actor.clone(),
            });
        }
        outcome.details = words.join("\n");
        Ok(outcome)
    }

    /// Closes the applier, for a node runtime that stops: waits for a running apply or
    /// rollback to finish, then refuses every later apply with [`ApplyError::Closed`] and
    /// cancels the pending try's rollback. The try is not lost: the next start reverts it
    /// ([`load_at_start`] makes the persisted config active), and a rollback firing after
    /// that start would overwrite what the new runtime made active.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cosi_node::config::apply::{ApplyError, ApplyMode, ApplyRequest, ConfigApplier};
    /// use cosi_node::config::restart::RestartSignal;
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let (signal, _restarts) = RestartSignal::new();
    /// let applier = ConfigApplier::new(Arc::new(cosi_state::MemoryState::default()), Arc::new(signal));
    /// applier.close().await;
    /// let refused = applier
    ///     .apply(ApplyRequest::patches(["machine: {nodeLabels: {a: b}}"], ApplyMode::Auto, "admin"))
    ///     .await
    ///     .unwrap_err();
    /// assert!(matches!(refused, ApplyError::Closed));
    /// assert!(refused.is_retryable());
    /// # });
    /// ```
    pub async fn close(&self) {
        // Waiting for the permit lets a running apply or rollback finish its writes.
        if let Ok(permit) = self.inner.applying.acquire().await {
            permit.forget();
        }
        self.inner.applying.close();
        self.cancel_pending_try();
    }

    /// Cancels the pending try's rollback; returns whether one was pending.
    fn cancel_pending_try(&self) -> bool {
        match lock(&self.inner.pending).take() {
            Some(pending) => {
                pending.timer.abort();
                true
            }
            None => false,
        }
    }

    /// Arms (or re-arms, keeping the first rollback target) the rollback of a try.
    fn arm_rollback(&self, current: MachineConfig, timeout: Duration) {
        let id = self
            .inner
            .next_try
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let deadline = Instant::now() + timeout;
        let mut pending = lock(&self.inner.pending);
        let rollback_to = match pending.take() {
            Some(previous) => {
                previous.timer.abort();
                previous.rollback_to
            }
            None => current,
        };
        let timer = tokio::spawn(rollback_at(Arc::downgrade(&self.inner), id, deadline));
        *pending = Some(PendingTry {
            id,
            rollback_to,
            deadline,
            timer,
        });
    }
}

/// Waits for the deadline, then puts the pre-try config back (unless the try was confirmed or
/// replaced meanwhile: the id no longer matches).
async fn rollback_at(inner: Weak<Inner>, id: u64, deadline: Instant) {
    tokio::time::sleep_until(deadline).await;
    let Some(inner) = inner.upgrade() else {
        return;
    };
    let Ok(_permit) = inner.applying.acquire().await else {
        return;
    };
    let rollback_to = {
        let mut pending = lock(&inner.pending);
        match pending.take() {
            Some(p) if p.id == id => p.rollback_to,
            other => {
                *pending = other;
                return;
            }
        }
    };
    if let Err(error) = roll_back(&*inner.state, rollback_to).await {
        tracing::error!(%error, "rolling back a 'try' config failed");
    }
}

async fn roll_back(state: &dyn State, rollback_to: MachineConfig) -> cosi_core::Result<()> {
    let stored = read_stored(state).await?;
    let tried = stored.active.as_ref().map(|a| a.spec.config());
    let diff = ConfigDiff::between(tried, rollback_to.config());
    let at = SystemTime::now();
    let written = write(state, ACTIVE, &rollback_to).await?;
    tracing::info!(version = %written.metadata.version(), "rolled back a 'try' config");
    history::record(
        state,
        Change {
            mode: "rollback",
            actor: NODE_ACTOR,
            active: Some(written.metadata.version()),
            persisted: stored.persisted.as_ref().map(|p| p.metadata.version()),
            diff: &diff,
            at,
        },
    )
    .await
}

/// What [`load_at_start`] did.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StartOutcome {
    /// The active config's version after the start (none: no config, maintenance).
    pub active_version: Option<Version>,
    /// Whether the active config changed (a staged config took effect, a try was reverted).
    pub changed: bool,
}

/// Makes the persisted config active; the daemon calls it at every start (before its
/// controllers run). This applies a staged config and reverts a try that was pending when
/// the node stopped. A node without a persisted config keeps what it has (none: maintenance).
pub async fn load_at_start(state: &dyn State) -> Result<StartOutcome, ApplyError> {
    let stored = read_stored(state).await?;
    let Some(persisted) = stored.persisted else {
        return Ok(StartOutcome {
            active_version: stored.active.map(|a| a.metadata.version()),
            changed: false,
        });
    };
    let before = stored.active.as_ref().map(|a| a.metadata.version());
    let at = SystemTime::now();
    let written = write(state, ACTIVE, &persisted.spec).await?;
    let changed = before != Some(written.metadata.version());
    if changed {
        let diff = ConfigDiff::between(
            stored.active.as_ref().map(|a| a.spec.config()),
            persisted.spec.config(),
        );
        history::record(
            state,
            Change {
                mode: "start",
                actor: NODE_ACTOR,
                active: Some(written.metadata.version()),
                persisted: Some(persisted.metadata.version()),
                diff: &diff,
                at,
            },
        )
        .await?;
    }
    Ok(StartOutcome {
        active_version: Some(written.metadata.version()),
        changed,
    })
}

fn new_config(
    input: &ApplyInput,
    base: Option<&MachineConfig>,
) -> Result<MachineConfig, ApplyError> {
    match input {
        ApplyInput::Config(bytes) => {
            let text = document::text_of(bytes, "config").map_err(ApplyError::Invalid)?;
            MachineConfig::from_text(text).map_err(ApplyError::Invalid)
        }
        ApplyInput::Patches(patches) => {
            let Some(base) = base else {
                return Err(ApplyError::Invalid(ConfigErrors::one(
                    "patches",
                    "there is no config to patch: apply a whole config first",
                )));
            };
            if patches.len() > MAX_PATCHES {
                return Err(ApplyError::Invalid(ConfigErrors::one(
                    "patches",
                    format!(
                        "{} patches are more than the {MAX_PATCHES} one apply takes",
                        patches.len()
                    ),
                )));
            }
            let mut parsed = Vec::with_capacity(patches.len());
            let mut errors = Vec::new();
            for (i, bytes) in patches.iter().enumerate() {
                match Patch::parse(bytes, &format!("patches[{i}]")) {
                    Ok(p) => parsed.push(p),
                    Err(e) => errors.extend(e.0),
                }
            }
            if !errors.is_empty() {
                return Err(ApplyError::Invalid(ConfigErrors(errors)));
            }
            let patched = patch::apply(base.config(), &parsed).map_err(ApplyError::Invalid)?;
            if patched == *base.config() {
                return Ok(base.clone());
            }
            let config = MachineConfig::from_config(patched);
            // What is stored must read back at the next start under the limits of a config
            // text (its size, documents, nesting): patches are bounded one by one, not in sum.
            if let Err(unreadable) = document::decode(config.text().as_bytes()) {
                let reasons: Vec<String> = unreadable.0.iter().map(ToString::to_string).collect();
                return Err(ApplyError::Invalid(ConfigErrors::one(
                    "patches",
                    format!(
                        "the patched config would not be accepted as a config: {}",
                        reasons.join("; ")
                    ),
                )));
            }
            Ok(config)
        }
    }
}

fn effect_in_words(mode: ApplyMode, restart: &[String], timeout: Duration) -> String {
    match mode {
        ApplyMode::NoReboot => "Applied configuration without a reboot".to_string(),
        ApplyMode::Reboot if restart.is_empty() => {
            "Persisted the configuration; the node runtime restarts to apply it".to_string()
        }
        ApplyMode::Reboot => format!(
            "Persisted the configuration; a restart is needed for {}, so the node runtime restarts to apply it",
            restart.join(", ")
        ),
        ApplyMode::Staged => {
            "Staged configuration to be applied after the next restart".to_string()
        }
        ApplyMode::Try => format!(
            "Applied configuration without a reboot\nThe config is applied in 'try' mode and will be automatically reverted back in {}",
            humantime::format_duration(timeout)
        ),
        // Invariant: auto is resolved before it is put in words.
        ApplyMode::Auto => "Applied configuration".to_string(),
    }
}

async fn read_stored(state: &dyn State) -> cosi_core::Result<Stored> {
    Ok(Stored {
        active: read_one(state, ACTIVE).await?,
        persisted: read_one(state, PERSISTED).await?,
    })
}

async fn read_one(
    state: &dyn State,
    id: &str,
) -> cosi_core::Result<Option<Arc<Resource<MachineConfig>>>> {
    match state.get(&MachineConfig::pointer(id)).await {
        Ok(stored) => typed(stored).map(Some),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

fn typed(stored: SharedResource) -> cosi_core::Result<Arc<Resource<MachineConfig>>> {
    downcast::<MachineConfig>(stored)
}

async fn write(
    state: &dyn State,
    id: &str,
    config: &MachineConfig,
) -> cosi_core::Result<Arc<Resource<MachineConfig>>> {
    let template = Resource::new(id, config.clone());
    state
        .modify(template, UpdateOptions::default(), |r| {
            r.spec = config.clone();
            Ok(())
        })
        .await
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock cannot leave the value half-changed (every critical
    // section is a single take or store), so a poisoned lock is still usable.
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}
