//! The client side: [`channel`] connects to a node, [`RemoteState`] is a [`cosi_core::State`]
//! over it, [`MachineClient`] calls its machine service.

mod answer;
mod channel;
mod deadline;
mod machine;
mod raw_answer;
mod remote_state;
mod watch;
mod watch_body;
mod watch_frame;

pub use channel::{channel, channel_with, ChannelOptions, ClientSecurity};
pub use deadline::DEFAULT_CALL_TIMEOUT;
pub use machine::MachineClient;
pub use remote_state::{RemoteOptions, RemoteState, DEFAULT_MAX_LIST_BYTES};
pub use watch::Backoff;
