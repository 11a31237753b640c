//! The integration tests, one binary: one module per suite, `common` the shared harness (a
//! private temporary namespace per test, the real binaries as separate processes, bounded
//! polling). Run one suite with `cargo test --test main SUITE::`. A new suite is a file
//! `tests/SUITE.rs` plus a `mod SUITE;` line below; `suites_are_all_declared` fails if the line
//! is missing (Cargo.toml sets `autotests = false`, so an undeclared file would never run).

mod common;

mod a2a;
mod adversary;
mod architecture;
mod ask;
mod ask_abuse;
mod ask_net;
mod ask_notify;
mod ask_tls;
mod bench;
mod chat_tty;
mod cli;
mod cli_life;
mod contain;
mod crash;
mod custody;
mod damage;
mod docs;
mod dsh_node;
mod foundation;
mod lab;
mod mcp;
mod messaging;
mod newcomer;
mod owner_page;
mod resource_gate;
mod resource_session;
mod transport;

/// Every `tests/*.rs` file is a module of this binary.
#[test]
fn suites_are_all_declared() {
    let main = std::fs::read_to_string("tests/main.rs").unwrap();
    let mut missing = Vec::new();
    for e in std::fs::read_dir("tests").unwrap().flatten() {
        let p = e.path();
        let Some(stem) = p.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if p.extension().is_some_and(|x| x == "rs")
            && stem != "main"
            && !main.lines().any(|l| l == format!("mod {stem};"))
        {
            missing.push(stem.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "not declared in tests/main.rs: {missing:?}"
    );
}
