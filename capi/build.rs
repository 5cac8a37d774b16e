//! Link arguments for libhipfile.so: the SONAME carries the ABI's major
//! version, and a version script keeps the dynamic symbol table down to the
//! 34 `hipFile*` functions (hipFile 0.5) so nothing else lands in a C program's namespace.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_string());
    println!("cargo:rerun-if-changed=hipfile.map");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhipfile.so.0");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/hipfile.map");
}
