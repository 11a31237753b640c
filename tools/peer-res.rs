//! The `peer-res` viewer: all the work is in `peerwire::cli::res`.

fn main() {
    let status = peerwire::cli::res::peer_res_main(std::env::args_os().skip(1).collect());
    std::process::exit(status);
}
