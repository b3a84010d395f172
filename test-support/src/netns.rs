//! Network namespaces for tests that need a real kernel: [`Namespace::create`] makes a named
//! namespace (`ip netns add`) with a veth pair `veth0` ↔ `veth1`, both up, and deletes it on
//! drop; [`Namespace::enter`] runs a test body on a thread inside it, so the netlink sockets
//! that body opens belong to it; [`Kernel`] inspects and changes it with `ip -n`, as a person
//! with a shell would. Nothing leaves the namespace. Needs root and iproute2
//! (`scripts/install-deps.sh` installs it); a namespace that cannot be made fails the test,
//! naming what is missing — it never skips.

use std::future::Future;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use nix::sched::{setns, CloneFlags};

/// A named network namespace with a veth pair (`veth0` ↔ `veth1`), deleted on drop.
pub struct Namespace {
    name: String,
}

/// `ip -n <namespace>`: what a person with a shell would use.
#[derive(Clone)]
pub struct Kernel {
    name: String,
}

impl Namespace {
    /// Creates a namespace with a fresh name and its veth pair, both ends up.
    pub fn create() -> Namespace {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "cosi-net-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        run(&["netns", "add", &name]).unwrap_or_else(|e| {
            panic!(
                "cannot create network namespace {name} (needs root and iproute2; \
                 scripts/install-deps.sh installs iproute2): {e}"
            )
        });
        let ns = Namespace { name };
        let kernel = ns.kernel();
        kernel.ip(&[
            "link", "add", "veth0", "type", "veth", "peer", "name", "veth1",
        ]);
        kernel.ip(&["link", "set", "veth0", "up"]);
        kernel.ip(&["link", "set", "veth1", "up"]);
        ns
    }

    /// A handle that inspects and changes the namespace's kernel state with `ip`.
    pub fn kernel(&self) -> Kernel {
        Kernel {
            name: self.name.clone(),
        }
    }

    /// Runs `body` on a thread inside the namespace, on its own current-thread runtime (a
    /// panic in it fails the test).
    pub fn enter<F, Fut>(&self, body: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let path = format!("/run/netns/{}", self.name);
        let thread = std::thread::spawn(move || {
            let file =
                std::fs::File::open(&path).unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
            setns(&file, CloneFlags::CLONE_NEWNET)
                .unwrap_or_else(|e| panic!("cannot enter {path}: {e}"));
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(body());
        });
        if let Err(panic) = thread.join() {
            std::panic::resume_unwind(panic);
        }
    }
}

impl Kernel {
    /// Runs `ip -n <namespace> ARGS`, failing the test if it fails.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        run(&full).unwrap_or_else(|e| panic!("ip {}: {e}", full.join(" ")))
    }

    /// Every `(link, address/prefix)` the kernel holds in the namespace.
    pub fn kernel_addresses(&self) -> Vec<(String, String)> {
        let json = self.ip(&["-j", "addr", "show"]);
        let links: serde_json::Value = serde_json::from_str(&json).expect("ip -j prints JSON");
        let mut out = Vec::new();
        for link in links.as_array().expect("a list of links") {
            let name = link["ifname"].as_str().unwrap_or_default().to_string();
            for info in link["addr_info"].as_array().into_iter().flatten() {
                let local = info["local"].as_str().unwrap_or_default();
                let prefix = info["prefixlen"].as_u64().unwrap_or_default();
                out.push((name.clone(), format!("{local}/{prefix}")));
            }
        }
        out
    }

    /// Whether `link` holds `address` (`a.b.c.d/len`).
    pub fn kernel_has(&self, link: &str, address: &str) -> bool {
        self.kernel_addresses()
            .iter()
            .any(|(l, a)| l == link && a == address)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = run(&["netns", "del", &self.name]);
    }
}

fn run(args: &[&str]) -> Result<String, String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).trim().to_string());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
