//! `peer-dir`: lists the directory of live peers; a thin shell over `peerwire::cli::dir`.

fn main() {
    std::process::exit(peerwire::cli::tool_main(
        "peer-dir",
        peerwire::cli::dir::cmd,
    ));
}
