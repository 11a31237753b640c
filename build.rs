//! Build script: in release builds for Linux, links the `peer` binary with
//! `link/idle-text.ld`, which puts the functions an idle `peer host` runs next to each other.
//! A read fault on code maps a whole 64 KiB neighbourhood of it, so an idle root whose few
//! hundred kilobytes of start-up and idle code were spread over the text segment kept almost
//! all of the binary resident. The script changes only where functions are placed
//! (`scripts/idle-layout.py` regenerates it); debug builds and the other binaries are untouched.
//! It is applied on x86_64 Linux, where the toolchain links with LLD; other linkers accept the
//! script too but may emit a second `.text` section for it.

use std::env;
use std::path::Path;

fn main() {
    let script = Path::new(&env::var("CARGO_MANIFEST_DIR").unwrap_or_default())
        .join("link")
        .join("idle-text.ld");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed={}", script.display());
    let target = |key: &str, want: &str| env::var(key).is_ok_and(|v| v == want);
    let linux = target("CARGO_CFG_TARGET_OS", "linux")
        && target("CARGO_CFG_TARGET_ENV", "gnu")
        && target("CARGO_CFG_TARGET_ARCH", "x86_64");
    let release = target("PROFILE", "release");
    if linux && release && script.is_file() {
        println!("cargo::rustc-link-arg-bin=peer=-Wl,-T,{}", script.display());
    }
}
