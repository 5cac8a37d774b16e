//! Runs the C ABI tests: gcc-compiled programs against the installed
//! headers and libraries, `tests/c/run.sh` for `libhipfile.so` (hipFile)
//! and `tests/c/cufile/run.sh` for `libcufile.so.0` (cuFile).
//!
//! The libraries come from the `hipfile-capi` and `hipfs-cufile` crates,
//! which this package's tests cannot depend on, so they are built here by a
//! nested cargo with its own target directory (`target/c-abi`): the outer
//! `cargo test` holds the lock on the main one, and sharing it would
//! deadlock. Set `HIPFILE_LIB` / `CUFILE_LIB` to test already built
//! libraries instead (what CI does after `cargo build --release`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn build_library(root: &Path, env: &str, package: &str, file: &str) -> PathBuf {
    if let Some(lib) = std::env::var_os(env) {
        return PathBuf::from(lib);
    }
    let target = root.join("target").join("c-abi");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(cargo)
        .args(["build", "--offline", "-p", package])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(root)
        .status()
        .unwrap_or_else(|e| panic!("run cargo to build {file}: {e}"));
    assert!(status.success(), "building {package} failed");
    target.join("debug").join(file)
}

/// Runs one runner script with the library in `env`; returns its stdout.
fn run_suite(root: &Path, script: &str, env: &str, lib: &Path) -> String {
    assert!(lib.exists(), "{} was not built", lib.display());
    let out = Command::new("bash")
        .arg(root.join(script))
        .env(env, lib)
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| {
            panic!("run {script} (needs bash, gcc, g++, make, pkg-config, binutils): {e}")
        });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    stdout
}

fn assert_all_ok(stdout: &str, tests: &[&str]) {
    // Every program ran and said so (a runner that skipped one would not).
    for t in tests {
        assert!(
            stdout.contains(&format!("{t}: ok")) || stdout.contains(&format!("{t:<10} ok")),
            "{t} did not report ok:\n{stdout}"
        );
    }
}

#[test]
fn c_programs_built_against_the_installed_header_and_library_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = build_library(root, "HIPFILE_LIB", "hipfile-capi", "libhipfile.so");
    let stdout = run_suite(root, "tests/c/run.sh", "HIPFILE_LIB", &lib);
    assert_all_ok(
        &stdout,
        &[
            "layout",
            "driver",
            "io",
            "userspace",
            "batch",
            "stream",
            "stats",
            "dlopen",
        ],
    );
    assert!(
        stdout.contains("exactly the 34 hipFile* functions exported"),
        "{stdout}"
    );
}

#[test]
fn cufile_c_programs_built_against_our_cufile_h_and_libcufile_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = build_library(root, "CUFILE_LIB", "hipfs-cufile", "libcufile.so");
    let stdout = run_suite(root, "tests/c/cufile/run.sh", "CUFILE_LIB", &lib);
    assert_all_ok(
        &stdout,
        &["layout", "driver", "io", "batch", "stream", "dlopen"],
    );
    assert!(
        stdout.contains("exactly the 47 cuFile* functions exported"),
        "{stdout}"
    );
    assert!(
        stdout.contains("cufile-c-abi: 8 passed, 0 failed"),
        "{stdout}"
    );
}
