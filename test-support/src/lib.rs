//! # cosi-test-support
//!
//! What the workspace's tests share and no user needs: a private etcd server ([`etcd`]) that
//! dies with the test process, network namespaces with a veth pair for tests on a real kernel
//! ([`netns`]), and the peer binaries the multi-process tests of this crate drive
//! (`cosi-etcd-peer`: a process on a shared etcd state, `disk-crash-writer`: a disk writer to
//! kill at random moments). Not published; never a dependency of a library, only a
//! dev-dependency.

pub mod etcd;
pub mod netns;
