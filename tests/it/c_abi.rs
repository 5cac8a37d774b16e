//! Runs the C ABI tests (`tests/c/run.sh`): gcc-compiled programs against
//! the installed `hipfile.h`, `hipfile.pc` and `libhipfile.so`.
//!
//! `libhipfile.so` comes from the `hipfile-capi` crate, which this package's
//! tests cannot depend on, so it is built here by a nested cargo with its own
//! target directory (`target/c-abi`): the outer `cargo test` holds the lock
//! on the main one, and sharing it would deadlock. Set `HIPFILE_LIB` to test
//! an already built library instead (what CI does after `cargo build --release`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn build_library(root: &Path) -> PathBuf {
    if let Some(lib) = std::env::var_os("HIPFILE_LIB") {
        return PathBuf::from(lib);
    }
    let target = root.join("target").join("c-abi");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(cargo)
        .args(["build", "--offline", "-p", "hipfile-capi"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(root)
        .status()
        .expect("run cargo to build libhipfile.so");
    assert!(status.success(), "building hipfile-capi failed");
    target.join("debug").join("libhipfile.so")
}

#[test]
fn c_programs_built_against_the_installed_header_and_library_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = build_library(root);
    assert!(lib.exists(), "{} was not built", lib.display());
    let out = Command::new("bash")
        .arg(root.join("tests/c/run.sh"))
        .env("HIPFILE_LIB", &lib)
        .current_dir(root)
        .output()
        .expect("run tests/c/run.sh (needs bash, gcc, g++, make, pkg-config, binutils)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "C ABI tests failed:\n{stdout}\n{stderr}"
    );
    // Every program ran and said so (a runner that skipped one would not).
    for t in [
        "layout",
        "driver",
        "io",
        "userspace",
        "batch",
        "stream",
        "dlopen",
    ] {
        assert!(
            stdout.contains(&format!("{t}: ok")),
            "{t} did not report ok:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("exactly the 31 hipFile* functions exported"),
        "{stdout}"
    );
}
