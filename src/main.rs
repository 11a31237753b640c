//! The `peer` binary: all the work is in the library's `cli` module.

fn main() {
    let status = peerwire::cli::main(std::env::args_os().collect());
    std::process::exit(status);
}
