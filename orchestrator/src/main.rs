//! `orchestrator`: the server (`serve`) and a command line for people. See `orchestrator --help`.

fn main() -> std::process::ExitCode {
    orchestrator::cli::main()
}
