//! The `peer` binary: all the work is in the library's `cli` module. Before anything runs it
//! tunes glibc's allocator for a long-lived root with many threads (see `tune_allocator`).

fn main() {
    tune_allocator();
    let status = peerwire::cli::main(std::env::args_os().collect());
    std::process::exit(status);
}

/// glibc gives every thread that allocates its own arena (up to 8 per core), and each keeps
/// what it freed; a root's connection threads then pin tens of megabytes after a burst. One
/// arena bounds that: a second (thread) arena grows its heap a page at a time with one
/// mprotect(2) per new page (glibc pads only the main arena's growth, by `M_TOP_PAD`), which
/// under load was about 0.4 mprotect per message in the receiver; the main arena grows by
/// brk(2) in padded steps. A fixed mmap threshold (which also stops glibc raising it after a
/// large free) keeps large transient buffers — snapshot encoding, big frames — in their own
/// mappings, returned to the system when freed.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::libc;
        /// Arenas the process may create (threads share them beyond that).
        const ARENAS_MAX: libc::c_int = 1;
        /// Allocations from this size on get their own mapping.
        const MMAP_THRESHOLD_BYTES: libc::c_int = 256 * 1024;
        // SAFETY: mallopt only changes allocator parameters; it is called once, before any
        // other thread exists, and its result (0 on failure) leaves the defaults in place.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, ARENAS_MAX);
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        }
    }
}
