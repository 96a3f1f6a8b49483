//! The `tollgate-bench` binary: load-tests any Envoy rate limit service and prints the report.

use std::process::ExitCode;

use clap::Parser;
use tollgate_bench::BenchArgs;

#[derive(Debug, Parser)]
#[command(
    name = "tollgate-bench",
    version,
    about = "Load-test any Envoy rate limit service (ShouldRateLimit only): decisions/s and latency percentiles"
)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut builder = if cli.args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if cli.args.threads > 1 {
            b.worker_threads(cli.args.threads);
        }
        b
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(tollgate_bench::run(&cli.args)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
