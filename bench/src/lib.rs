//! Shared pieces of the benchmark harnesses: statistics, docker helpers, a private network with
//! fixed addresses (so no `docker inspect` sits inside a timed section), and report printing.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

/// The benchmark network and the fixed address its containers get.
pub const NETWORK: &str = "agentbox-bench";
pub const SUBNET: &str = "172.31.250.0/24";

/// Runs `docker` and returns trimmed stdout, failing with stderr.
// A benchmark drives the host's docker CLI and times it; the bench process reaps nothing but
// its own children, so std waits for them.
#[allow(clippy::disallowed_methods)]
pub fn docker(args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("docker")
        .args(args)
        .output()
        .with_context(|| format!("running docker {args:?}"))?;
    if !output.status.success() {
        bail!(
            "docker {args:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Creates the benchmark network if it does not exist.
pub fn ensure_network() -> anyhow::Result<()> {
    if docker(&["network", "inspect", NETWORK]).is_err() {
        docker(&["network", "create", "--subnet", SUBNET, NETWORK])?;
    }
    Ok(())
}

/// Summary statistics of a sample, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub n: usize,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(samples: &[Duration]) -> Self {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        ms.sort_by(|a, b| a.total_cmp(b));
        let pick = |q: f64| {
            if ms.is_empty() {
                return f64::NAN;
            }
            let i = ((ms.len() as f64 - 1.0) * q).round() as usize;
            ms[i.min(ms.len() - 1)]
        };
        let median = if ms.is_empty() {
            f64::NAN
        } else if ms.len() % 2 == 1 {
            ms[ms.len() / 2]
        } else {
            (ms[ms.len() / 2 - 1] + ms[ms.len() / 2]) / 2.0
        };
        Self {
            n: ms.len(),
            median,
            p90: pick(0.9),
            p99: pick(0.99),
            min: ms.first().copied().unwrap_or(f64::NAN),
            max: ms.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Prints one row of a results table.
pub fn print_row(name: &str, stats: &Stats) {
    println!(
        "| {name:<44} | {:>4} | {:>9.1} | {:>9.1} | {:>9.1} | {:>9.1} |",
        stats.n, stats.median, stats.p90, stats.min, stats.max
    );
}

pub fn print_header() {
    println!(
        "| {:<44} | {:>4} | {:>9} | {:>9} | {:>9} | {:>9} |",
        "what", "n", "median ms", "p90 ms", "min ms", "max ms"
    );
    println!(
        "|{:-<46}|{:-<6}|{:-<11}|{:-<11}|{:-<11}|{:-<11}|",
        "", "", "", "", "", ""
    );
}

/// Reads `--name value` from the command line.
pub fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
