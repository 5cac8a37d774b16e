//! Tells the tests which hardware and privileges this machine has (see
//! build-support/hw_probe.rs): a test whose needs are missing is reported as
//! ignored, not passed.

include!("../build-support/hw_probe.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../build-support/hw_probe.rs");
    probe_hardware();
}
