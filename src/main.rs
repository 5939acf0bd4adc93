//! The `toolgate` binary: everything happens in the library's `cli` module.

fn main() -> std::process::ExitCode {
    toolgate::cli::main()
}
