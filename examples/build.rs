//! Build facts for the `node` daemon's `version`: the source revision (when built from a git
//! checkout), its commit time, and the compiler's version. A missing git or rustc leaves the
//! value empty: the build never fails for a version string.

use std::process::Command;

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.trim().to_string())
}

fn main() {
    let sha = output("git", &["rev-parse", "--short=12", "HEAD"]).unwrap_or_default();
    // The commit's time rather than the build's, so two builds of one commit agree.
    let committed = output("git", &["log", "-1", "--format=%cI"]).unwrap_or_default();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rust_version = output(&rustc, &["--version"]).unwrap_or_default();
    println!("cargo:rustc-env=COSI_GIT_SHA={sha}");
    println!("cargo:rustc-env=COSI_GIT_COMMITTED={committed}");
    println!("cargo:rustc-env=COSI_RUSTC_VERSION={rust_version}");
    // A checkout changes HEAD; a commit changes the branch's ref (loose or packed).
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(output("git", &["symbolic-ref", "-q", "HEAD"]));
    for path in watched {
        // A watched path that does not exist would make cargo rerun this script every build.
        let file = output("git", &["rev-parse", "--git-path", &path]);
        if let Some(file) = file.filter(|f| std::path::Path::new(f).exists()) {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
