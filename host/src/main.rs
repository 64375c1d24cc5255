//! The `sluice` binary; everything lives in [`sluice::cli`].

fn main() -> std::process::ExitCode {
    sluice::cli::main()
}
