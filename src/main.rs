//! The `toolgate` binary: everything happens in the library's `cli` module.

/// mimalloc: the decision path allocates many small, short-lived values (Cedar builds its
/// values per request); glibc malloc spent about a tenth of the server's CPU on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    toolgate::cli::main()
}
