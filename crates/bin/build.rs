//! Records the commit the binary is built from, for `sundial --version` (README.md, "Running a
//! server"): `SUNDIAL_COMMIT` from the environment when set (a build outside a Git checkout,
//! such as an image build, passes it), else the checkout's `HEAD` (12 hex digits), else
//! `unknown`. The build script runs again when `HEAD` or the branch it names moves.

use std::path::PathBuf;
use std::process::Command;

/// `git` with `args` in this crate's folder: its trimmed output, `None` when it fails.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=SUNDIAL_COMMIT");
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = PathBuf::from(dir);
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        println!(
            "cargo:rerun-if-changed={}",
            dir.join("packed-refs").display()
        );
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", dir.join(branch).display());
        }
    }
    let commit = std::env::var("SUNDIAL_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SUNDIAL_COMMIT={commit}");
}
