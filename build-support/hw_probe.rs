// Shared by the build scripts of the crates whose tests need hardware or
// privileges (included with `include!`, so there is one copy).
//
// A test that needs something this machine lacks must be *reported* as
// ignored, not pass silently. libtest decides "ignored" at compile time, so
// the build script probes once and sets a cfg per capability; the tests say
// `#[cfg_attr(not(hipfs_fuse), ignore = "...")]`. `HIPFS_REQUIRE_{GPU,FUSE,
// VERBS}=1` forces the cfg on, and the test's runtime check then fails
// loudly where the thing is missing (CI sets FUSE, the VM stage VERBS, the
// GPU scripts GPU). The GPU is only probed through device nodes, since test
// binaries are often built on a machine without one and run elsewhere.

/// Emits `cargo:rustc-cfg` lines for the capabilities present (or required).
#[allow(dead_code)]
pub fn probe_hardware() {
    for v in ["HIPFS_REQUIRE_GPU", "HIPFS_REQUIRE_FUSE", "HIPFS_REQUIRE_VERBS"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    for cfg in [
        "hipfs_gpu",
        "hipfs_fuse",
        "hipfs_verbs",
        "hipfs_root",
        "hipfs_systemd_analyze",
    ] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
    }
    let required = |v: &str| std::env::var(v).is_ok_and(|s| s == "1");
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false);
    let fuse = root
        && std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .is_ok();
    let gpu = std::path::Path::new("/dev/nvidiactl").exists()
        || std::path::Path::new("/dev/kfd").exists();
    let verbs = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    if fuse || required("HIPFS_REQUIRE_FUSE") {
        println!("cargo:rustc-cfg=hipfs_fuse");
    }
    if gpu || required("HIPFS_REQUIRE_GPU") {
        println!("cargo:rustc-cfg=hipfs_gpu");
    }
    if verbs || required("HIPFS_REQUIRE_VERBS") {
        println!("cargo:rustc-cfg=hipfs_verbs");
    }
    if root {
        println!("cargo:rustc-cfg=hipfs_root");
    }
    let on_path = |prog: &str| {
        std::env::var_os("PATH").is_some_and(|p| {
            std::env::split_paths(&p).any(|d| d.join(prog).is_file())
        })
    };
    if on_path("systemd-analyze") {
        println!("cargo:rustc-cfg=hipfs_systemd_analyze");
    }
}
