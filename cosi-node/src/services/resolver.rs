//! From an image reference to a program on this node.
//!
//! The node runs no containers. A spec that names an image (the kubelet's
//! `machine.kubelet.image`) is run as the program the daemon maps the image's *repository* to
//! — the reference without its tag or digest — with the mapping's leading arguments before the
//! spec's own. `ghcr.io/siderolabs/kubelet:v1.31.0` and `…/kubelet@sha256:…` both resolve
//! through the entry for `ghcr.io/siderolabs/kubelet`. An image with no entry is a clear
//! failure of the service (`Failed`, not retried until its spec changes), never a guess.

use std::collections::BTreeMap;

/// What an image runs as: a program and the arguments put before the spec's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageProgram {
    /// The program's path.
    pub command: String,
    /// Arguments before the spec's own.
    pub args: Vec<String>,
}

/// Image repositories → programs, configured by the daemon.
///
/// ```
/// use cosi_node::services::ImageResolver;
/// let resolver = ImageResolver::new().with_image("ghcr.io/siderolabs/kubelet", "/usr/bin/demo-kubelet", ["--v=2"]);
/// let program = resolver.resolve("ghcr.io/siderolabs/kubelet:v1.31.0").unwrap();
/// assert_eq!(program.command, "/usr/bin/demo-kubelet");
/// assert_eq!(program.args, vec!["--v=2".to_string()]);
/// assert_eq!(
///     resolver.resolve("docker.io/library/nginx:1").unwrap_err(),
///     "image \"docker.io/library/nginx:1\" has no program on this node (repository \"docker.io/library/nginx\" is not mapped)",
/// );
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageResolver {
    images: BTreeMap<String, ImageProgram>,
}

impl ImageResolver {
    /// A resolver that knows no image.
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps `repository` to `command` with leading `args`.
    pub fn with_image<I, S>(mut self, repository: &str, command: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.images.insert(
            repository.to_string(),
            ImageProgram {
                command: command.into(),
                args: args.into_iter().map(Into::into).collect(),
            },
        );
        self
    }

    /// The program for `image`, or why there is none.
    pub fn resolve(&self, image: &str) -> Result<&ImageProgram, String> {
        let repository = repository_of(image);
        self.images.get(repository).ok_or_else(|| {
            format!("image {image:?} has no program on this node (repository {repository:?} is not mapped)")
        })
    }
}

/// The repository of an image reference: without `@digest`, and without a `:tag` after the
/// last `/` (a `:` before it is a registry port, as in `localhost:5000/kubelet`).
///
/// ```
/// use cosi_node::services::repository_of;
/// assert_eq!(repository_of("ghcr.io/x/kubelet:v1.31.0"), "ghcr.io/x/kubelet");
/// assert_eq!(repository_of("localhost:5000/kubelet"), "localhost:5000/kubelet");
/// assert_eq!(repository_of("kubelet@sha256:abcd"), "kubelet");
/// ```
pub fn repository_of(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    let name_start = image.rfind('/').map_or(0, |i| i + 1);
    match image[name_start..].find(':') {
        Some(colon) => &image[..name_start + colon],
        None => image,
    }
}
