//! The `toolgate` binary: everything happens in the library's `cli` module.

/// mimalloc: the decision path allocates many small, short-lived values (Cedar builds its
/// values per request); glibc malloc spent about a tenth of the server's CPU on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    toolgate::memory::install(collect);
    toolgate::cli::main()
}

/// Returns the calling thread's freed memory to the OS (see `toolgate::memory`).
#[expect(
    unsafe_code,
    reason = "mimalloc's `mi_collect` is a C function; it takes no pointers"
)]
fn collect() {
    // SAFETY: `mi_collect` only walks the calling thread's heap and the shared arenas, under
    // mimalloc's own locks; it is meant to be called from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
