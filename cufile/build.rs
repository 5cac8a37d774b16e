//! Link arguments for libcufile.so: SONAME `libcufile.so.0` (what cuFile
//! clients link and dlopen), and a version script that keeps the dynamic
//! symbol table down to the `cuFile*` functions.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_string());
    println!("cargo:rerun-if-changed=cufile.map");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcufile.so.0");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/cufile.map");
}
