//! The `peer-res` viewer: a thin shell over `peerwire::cli::res`.

fn main() {
    std::process::exit(peerwire::cli::tool_main(
        "peer-res",
        peerwire::cli::res::peer_res,
    ));
}
