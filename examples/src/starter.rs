//! The starter configs of `cosictl gen config`, made ready for several nodes on one machine:
//! what the `demo` and the end-to-end story test both do before their first apply.

/// The kubelet image line of a starter config (`cosictl gen config`'s default image).
const IMAGE_LINE: &str = "    image: ghcr.io/siderolabs/kubelet:v1.31.1\n";

/// `text`, a starter config written with `--hostname cp-1`, for the node `hostname` whose
/// kubelet serves its health endpoint on `healthz_port` (nodes sharing a machine need their own
/// ports). Refuses a text that is not such a starter config, rather than returning it unchanged.
///
/// ```
/// let starter = "machine:\n  network:\n    hostname: cp-1\n  kubelet:\n    image: ghcr.io/siderolabs/kubelet:v1.31.1\n";
/// let worker = examples::starter::for_node(starter, "worker-1", 10249).unwrap();
/// assert!(worker.contains("    hostname: worker-1\n"));
/// assert!(worker.contains("    extraArgs:\n      healthz-port: '10249'\n"));
/// assert!(examples::starter::for_node("machine: {}\n", "w", 1).is_err());
/// ```
pub fn for_node(text: &str, hostname: &str, healthz_port: u16) -> Result<String, String> {
    if !text.contains(IMAGE_LINE) || !text.contains("hostname: cp-1\n") {
        return Err(format!(
            "not a starter config of `cosictl gen config --hostname cp-1`:\n{text}"
        ));
    }
    Ok(text
        .replace("hostname: cp-1\n", &format!("hostname: {hostname}\n"))
        .replace(
            IMAGE_LINE,
            &format!("{IMAGE_LINE}    extraArgs:\n      healthz-port: '{healthz_port}'\n"),
        ))
}

/// A free loopback port (for a kubelet's health endpoint).
pub fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}
