//! The `peer-res` viewer: all the work is in `peerwire::resource::cli`.

fn main() {
    let status = peerwire::resource::cli::peer_res_main(std::env::args_os().skip(1).collect());
    std::process::exit(status);
}
