//! With the `verbs` feature, check before rdma-sys's bindgen does that the
//! rdma-core headers and libclang are installed, so a fresh machine gets one
//! readable error naming the packages instead of a bindgen backtrace.

use std::path::Path;
use std::process::Command;

include!("../build-support/hw_probe.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../build-support/hw_probe.rs");
    probe_hardware();
    println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");
    if std::env::var_os("CARGO_FEATURE_VERBS").is_none() {
        return;
    }
    let mut missing = Vec::new();
    for (lib, pkg) in [
        ("libibverbs", "libibverbs-dev"),
        ("librdmacm", "librdmacm-dev"),
    ] {
        if !pkg_config_has(lib) {
            missing.push(pkg);
        }
    }
    if !libclang_present() {
        missing.push("libclang-dev");
    }
    if missing.is_empty() {
        return;
    }
    eprintln!(
        "\nhipfs-rdma: the `verbs` feature (default) needs the rdma-core headers and libclang.\n\
         Missing: {}.\n\
         Install them (Debian/Ubuntu: apt-get install {} pkg-config), or run\n\
         `bash scripts/setup.sh`, or build without verbs: `cargo build --no-default-features`\n\
         (then the remote path uses TCP only).\n",
        missing.join(", "),
        missing.join(" ")
    );
    std::process::exit(1);
}

fn pkg_config_has(lib: &str) -> bool {
    Command::new("pkg-config")
        .args(["--exists", lib])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Where bindgen (through clang-sys) looks: LIBCLANG_PATH, then the usual
/// library folders of Debian and Ubuntu.
fn libclang_present() -> bool {
    let mut dirs: Vec<String> = Vec::new();
    if let Ok(p) = std::env::var("LIBCLANG_PATH") {
        dirs.push(p);
    }
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("llvm-") {
                dirs.push(format!("/usr/lib/{name}/lib"));
            }
        }
    }
    dirs.extend([
        "/usr/lib/x86_64-linux-gnu".into(),
        "/usr/lib/aarch64-linux-gnu".into(),
        "/usr/lib64".into(),
        "/usr/lib".into(),
    ]);
    dirs.iter().any(|d| {
        std::fs::read_dir(Path::new(d)).is_ok_and(|rd| {
            rd.flatten().any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with("libclang") && n.contains(".so") && !n.starts_with("libclang-cpp")
            })
        })
    })
}
