//! Idle memory of a sandbox, program by program: where the figure `docker stats` reports goes.
//!
//! Starts `--running` sandboxes of `--image` (default 1) with the orchestrator's default limits,
//! waits for every `/readyz`, lets them settle `--settle-secs` (default 15, as the orchestrator
//! benchmark does), then prints for the first one:
//!
//! - each process's resident (RSS) and proportional (PSS) memory from the host's
//!   `/proc/<pid>/smaps_rollup`, PSS split into anonymous, file-backed and shared memory (shmem:
//!   tmpfs and memfd, e.g. Chromium's and X's shared buffers), and the sums per program;
//! - the container cgroup's `memory.stat` (cgroup v1 or v2): anonymous, shmem, active and
//!   inactive file cache, and kernel memory (what the usage holds beyond pages);
//! - the figure `docker stats` shows (usage minus inactive file cache), computed from the cgroup
//!   and as the CLI prints it, and with several sandboxes the median over all of them.
//!
//! It does so twice in one run: for the image as it is (x11vnc starts when the first viewer
//! connects) and, as the baseline, for the same image with x11vnc started at boot (its programs
//! file bind-mounted with `autostart = true`), the program set before programs started on first
//! use.
//!
//! The processes are read from the host, not through `docker exec`: sandboxd is non-dumpable and
//! the container has no capabilities, so inside it nobody may read PID 1's memory maps. Run it
//! as root (as scripts/test.sh does); an unreadable process is listed with no figures.
//!
//! `--env NAME=VALUE` (repeatable) passes environment to the sandboxes, e.g. `CHROMIUM_FLAGS`, to
//! try a flag without rebuilding the image.
//!
//! `cargo run --release -p agentbox-bench -- memory --image agentbox/sandbox:latest`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentbox_bench::{NETWORK, SANDBOX_LIMITS, arg, docker, ensure_network, parse_mib, wait_ready};
use anyhow::{Context, bail};

const KEY: &str = "bench-memory-key";
/// The sandboxes get 172.31.250.<FIRST_HOST + i> on the benchmark network.
const FIRST_HOST: usize = 100;
const MIB: f64 = 1024.0 * 1024.0;
/// Where sandboxd reads its programs in the image.
const PROGRAMS_FILE: &str = "/etc/sandboxd/programs.toml";

/// The containers this run started, removed on drop (also when the run fails half-way).
struct Sandboxes {
    names: Vec<String>,
}

impl Drop for Sandboxes {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = docker(&["rm", "-f", "-v", name]);
        }
    }
}

/// One process's memory, in KiB, from `smaps_rollup`.
#[derive(Default, Clone, Copy)]
struct Usage {
    rss: u64,
    pss: u64,
    pss_anon: u64,
    pss_file: u64,
    pss_shmem: u64,
}

impl Usage {
    fn add(&mut self, other: &Usage) {
        self.rss += other.rss;
        self.pss += other.pss;
        self.pss_anon += other.pss_anon;
        self.pss_file += other.pss_file;
        self.pss_shmem += other.pss_shmem;
    }
}

struct Process {
    pid: u32,
    program: String,
    usage: Option<Usage>,
}

/// What the sandboxes of one measurement run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ProgramSet {
    /// The image as it is: x11vnc starts when the first viewer connects.
    VncOnDemand,
    /// The baseline: the same image with x11vnc started at boot, as every program was before
    /// programs started on first use (its programs file bind-mounted with `autostart = true`).
    VncAtBoot,
}

impl ProgramSet {
    fn label(self) -> &'static str {
        match self {
            ProgramSet::VncOnDemand => "x11vnc on first viewer (the image)",
            ProgramSet::VncAtBoot => "x11vnc at boot (baseline)",
        }
    }
}

pub async fn main() -> anyhow::Result<()> {
    let image: String = arg("--image", "agentbox/sandbox:latest".to_string());
    let running: usize = arg("--running", 1);
    let settle: u64 = arg("--settle-secs", 15);
    if !(1..=100).contains(&running) {
        bail!("--running must be 1 to 100");
    }
    let env = repeated("--env");
    ensure_network()?;
    let at_boot = programs_with_vnc_at_boot(&image)?;
    let mut medians = Vec::new();
    for set in [ProgramSet::VncOnDemand, ProgramSet::VncAtBoot] {
        println!(
            "idle memory: image {image}, {}, {running} sandbox(es) running, measured {settle} s after the last /readyz",
            set.label()
        );
        for e in &env {
            println!("  with -e {e}");
        }
        let median = measure(&image, set, running, settle, &env, at_boot.path()).await?;
        medians.push((set, median));
        println!();
    }
    for (set, median) in &medians {
        println!(
            "docker stats median per sandbox, {}: {median:.1} MiB",
            set.label()
        );
    }
    if let [(_, image_median), (_, baseline)] = medians[..] {
        println!(
            "idle memory per sandbox: median {image_median:.1} MiB (goal <= 150) vs {baseline:.1} MiB with x11vnc at boot ({:.2}x)",
            image_median / baseline
        );
    }
    Ok(())
}

/// The image's programs file with x11vnc's `autostart = false` made true, in a temporary file.
fn programs_with_vnc_at_boot(image: &str) -> anyhow::Result<tempfile::NamedTempFile> {
    let programs = docker(&["run", "--rm", "--entrypoint", "cat", image, PROGRAMS_FILE])?;
    let section = programs
        .find("name = \"x11vnc\"")
        .context("no x11vnc program in the image's programs file")?;
    let end = programs[section..]
        .find("[[program]]")
        .map_or(programs.len(), |at| section + at);
    let flag = programs[section..end]
        .find("autostart = false")
        .map(|at| section + at)
        .context("x11vnc is not started on demand in the image's programs file")?;
    let changed = format!(
        "{}autostart = true{}",
        &programs[..flag],
        &programs[flag + "autostart = false".len()..]
    );
    let mut file = tempfile::NamedTempFile::new()?;
    std::io::Write::write_all(&mut file, changed.as_bytes())?;
    // Mounted read-only into the container, where sandboxd reads it.
    std::fs::set_permissions(
        file.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )?;
    Ok(file)
}

/// Starts `running` sandboxes of `set`, waits for them and `settle` seconds, prints the first
/// one's processes and cgroup, and returns the median of `docker stats`' figure over all.
async fn measure(
    image: &str,
    set: ProgramSet,
    running: usize,
    settle: u64,
    env: &[String],
    at_boot: &Path,
) -> anyhow::Result<f64> {
    let mut sandboxes = Sandboxes { names: Vec::new() };
    let mut ips = Vec::new();
    let mount = format!("{}:{PROGRAMS_FILE}:ro", at_boot.display());
    for i in 0..running {
        let name = format!("agentbox-bench-memory-{}-{i}", std::process::id());
        let ip = format!("172.31.250.{}", FIRST_HOST + i);
        let _ = docker(&["rm", "-f", &name]);
        let key = format!("SANDBOX_API_KEY={KEY}");
        let mut args = vec![
            "run",
            "-d",
            "--name",
            &name,
            "--network",
            NETWORK,
            "--ip",
            &ip,
            "-e",
            &key,
        ];
        args.extend(SANDBOX_LIMITS);
        for e in env {
            args.extend(["-e", e.as_str()]);
        }
        if set == ProgramSet::VncAtBoot {
            args.extend(["-v", mount.as_str()]);
        }
        args.push(image);
        docker(&args)?;
        sandboxes.names.push(name);
        ips.push(ip);
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()?;
    let deadline = Instant::now() + Duration::from_secs(60 + 15 * running as u64);
    for ip in &ips {
        wait_ready(&client, ip, KEY, deadline).await?;
    }
    tokio::time::sleep(Duration::from_secs(settle)).await;

    let first = &sandboxes.names[0];
    let pid: u32 = docker(&["inspect", "-f", "{{.State.Pid}}", first])?
        .parse()
        .context("the container's PID")?;
    let cgroup = memory_cgroup(pid)?;
    let processes = processes(&cgroup)?;
    let vnc_running = processes.iter().any(|p| p.program == "x11vnc");
    if vnc_running != (set == ProgramSet::VncAtBoot) {
        bail!(
            "{}: x11vnc is {}running",
            set.label(),
            if vnc_running { "" } else { "not " }
        );
    }
    print_processes(&processes);
    let docker_figure = print_cgroup(&cgroup)?;

    let stats = docker(&[
        "stats",
        "--no-stream",
        "--format",
        "{{.Name}}\t{{.MemUsage}}",
    ])?;
    let mut per_sandbox: Vec<(String, f64)> = stats
        .lines()
        .filter_map(|l| {
            let (name, usage) = l.split_once('\t')?;
            sandboxes.names.iter().any(|n| n == name).then_some(())?;
            Some((name.to_string(), parse_mib(usage)?))
        })
        .collect();
    let first_cli = per_sandbox
        .iter()
        .find(|(n, _)| n == first)
        .map_or(f64::NAN, |(_, v)| *v);
    println!(
        "docker stats (usage - inactive file): {docker_figure:.1} MiB from the cgroup, {first_cli:.1} MiB as the CLI prints it"
    );
    per_sandbox.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (Some(min), Some(max)) = (per_sandbox.first(), per_sandbox.last()) else {
        bail!("docker stats listed none of the sandboxes");
    };
    let median = per_sandbox[per_sandbox.len() / 2].1;
    println!(
        "docker stats over {} sandboxes: median {median:.1} MiB, min {:.1}, max {:.1}",
        per_sandbox.len(),
        min.1,
        max.1
    );
    Ok(median)
}

/// Every value of a repeatable `--name value` argument.
fn repeated(name: &str) -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .filter(|w| w[0] == name)
        .map(|w| w[1].clone())
        .collect()
}

/// The memory cgroup directory of `pid` as the host sees it (cgroup v1's memory hierarchy, or
/// the unified one).
fn memory_cgroup(pid: u32) -> anyhow::Result<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .with_context(|| format!("reading /proc/{pid}/cgroup (run the benchmark as root)"))?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            return Ok(Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')));
        }
    }
    let unified = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .context("no memory cgroup")?;
    Ok(Path::new("/sys/fs/cgroup").join(unified.trim_start_matches('/')))
}

/// Every process of the cgroup with its program name and memory.
fn processes(cgroup: &Path) -> anyhow::Result<Vec<Process>> {
    let procs = std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .with_context(|| format!("reading {}/cgroup.procs", cgroup.display()))?;
    let mut out: Vec<Process> = procs
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .map(|pid| Process {
            pid,
            program: program_name(pid),
            usage: smaps_rollup(pid),
        })
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.usage.map_or(0, |u| u.pss)));
    Ok(out)
}

/// The process's name, with Chromium's process type (`chromium:renderer`, and the utility
/// sub-type for utility processes).
fn program_name(pid: u32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    // Chromium's children rewrite their command line as one space-separated string.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0 || *b == b' ')
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let flag = |name: &str| {
        args.iter()
            .find_map(|a| a.strip_prefix(name).map(str::to_string))
    };
    match flag("--type=") {
        Some(kind) => match flag("--utility-sub-type=") {
            Some(sub) => format!("chromium:{kind}:{}", sub.rsplit('.').next().unwrap_or(&sub)),
            None => format!("chromium:{kind}"),
        },
        None => comm,
    }
}

fn smaps_rollup(pid: u32) -> Option<Usage> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let mut usage = Usage::default();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let value: u64 = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        match key {
            "Rss" => usage.rss = value,
            "Pss" => usage.pss = value,
            "Pss_Anon" => usage.pss_anon = value,
            "Pss_File" => usage.pss_file = value,
            "Pss_Shmem" => usage.pss_shmem = value,
            _ => {}
        }
    }
    Some(usage)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn print_processes(processes: &[Process]) {
    println!();
    println!(
        "| {:<34} | {:>7} | {:>8} | {:>8} | {:>8} | {:>8} | {:>9} |",
        "process", "pid", "RSS MiB", "PSS MiB", "anon", "file", "shmem"
    );
    println!(
        "|{:-<36}|{:-<9}|{:-<10}|{:-<10}|{:-<10}|{:-<10}|{:-<11}|",
        "", "", "", "", "", "", ""
    );
    let mut per_program: BTreeMap<String, (usize, Usage)> = BTreeMap::new();
    let mut total = Usage::default();
    for p in processes {
        match &p.usage {
            Some(u) => {
                println!(
                    "| {:<34} | {:>7} | {:>8.1} | {:>8.1} | {:>8.1} | {:>8.1} | {:>9.1} |",
                    p.program,
                    p.pid,
                    mib(u.rss),
                    mib(u.pss),
                    mib(u.pss_anon),
                    mib(u.pss_file),
                    mib(u.pss_shmem)
                );
                total.add(u);
                let program = p.program.split(':').next().unwrap_or(&p.program);
                let entry = per_program.entry(program.to_string()).or_default();
                entry.0 += 1;
                entry.1.add(u);
            }
            None => println!(
                "| {:<34} | {:>7} | {:>8} | {:>8} | {:>8} | {:>8} | {:>9} |",
                p.program, p.pid, "?", "?", "?", "?", "?"
            ),
        }
    }
    println!(
        "| {:<34} | {:>7} | {:>8.1} | {:>8.1} | {:>8.1} | {:>8.1} | {:>9.1} |",
        "all processes",
        processes.len(),
        mib(total.rss),
        mib(total.pss),
        mib(total.pss_anon),
        mib(total.pss_file),
        mib(total.pss_shmem)
    );
    println!();
    println!("per program (PSS MiB): ");
    let mut programs: Vec<_> = per_program.into_iter().collect();
    programs.sort_by_key(|(_, (_, u))| std::cmp::Reverse(u.pss));
    for (name, (count, u)) in programs {
        println!(
            "  {name:<16} {count:>2} process(es)  PSS {:>6.1}  (anon {:>6.1}, file {:>6.1}, shmem {:>5.1})",
            mib(u.pss),
            mib(u.pss_anon),
            mib(u.pss_file),
            mib(u.pss_shmem)
        );
    }
}

/// Prints the cgroup's breakdown; returns `docker stats`' figure (usage - inactive file) in MiB.
fn print_cgroup(cgroup: &Path) -> anyhow::Result<f64> {
    let stat_text = std::fs::read_to_string(cgroup.join("memory.stat"))
        .with_context(|| format!("reading {}/memory.stat", cgroup.display()))?;
    let stat: BTreeMap<&str, u64> = stat_text
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k, v.trim().parse().ok()?))
        })
        .collect();
    let get = |k: &str| stat.get(k).copied().unwrap_or(0) as f64 / MIB;
    let read_bytes = |file: &str| -> Option<f64> {
        std::fs::read_to_string(cgroup.join(file))
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .map(|b| b / MIB)
    };
    println!();
    let docker_figure = if let Some(usage) = read_bytes("memory.usage_in_bytes") {
        // cgroup v1: `rss` is anonymous memory, `cache` the page cache including shmem.
        let kernel = read_bytes("memory.kmem.usage_in_bytes");
        println!(
            "cgroup (v1) memory.stat: usage {usage:.1} MiB = anon (rss) {:.1} + cache {:.1} (of which shmem {:.1}, mapped files {:.1}; file cache active {:.1}, inactive {:.1}) + kernel {}",
            get("total_rss"),
            get("total_cache"),
            get("total_shmem"),
            get("total_mapped_file"),
            get("total_active_file"),
            get("total_inactive_file"),
            kernel.map_or("?".to_string(), |k| format!("{k:.1}")),
        );
        println!(
            "  LRU lists: active anon {:.1}, inactive anon {:.1} (anon and shmem), active file {:.1}, inactive file {:.1}, unevictable {:.1}",
            get("total_active_anon"),
            get("total_inactive_anon"),
            get("total_active_file"),
            get("total_inactive_file"),
            get("total_unevictable")
        );
        let figure = usage - get("total_inactive_file");
        println!(
            "  docker stats' figure {figure:.1} MiB = anon {:.1} + shmem {:.1} + active file cache {:.1} + kernel {:.1} (+ {:.1} other)",
            get("total_rss"),
            get("total_shmem"),
            get("total_active_file"),
            kernel.unwrap_or(0.0),
            figure
                - get("total_rss")
                - get("total_shmem")
                - get("total_active_file")
                - kernel.unwrap_or(0.0)
        );
        figure
    } else {
        let usage = read_bytes("memory.current").context("neither cgroup v1 nor v2 usage")?;
        println!(
            "cgroup (v2) memory.stat: usage {usage:.1} MiB: anon {:.1}, file {:.1} (shmem {:.1}, mapped {:.1}; active {:.1}, inactive {:.1}), kernel {:.1} (slab {:.1}, sock {:.1})",
            get("anon"),
            get("file"),
            get("shmem"),
            get("file_mapped"),
            get("active_file"),
            get("inactive_file"),
            get("kernel"),
            get("slab"),
            get("sock"),
        );
        let figure = usage - get("inactive_file");
        println!(
            "  docker stats' figure {figure:.1} MiB = anon {:.1} + shmem {:.1} + active file cache {:.1} + kernel {:.1} (+ {:.1} other)",
            get("anon"),
            get("shmem"),
            get("active_file"),
            get("kernel"),
            figure - get("anon") - get("shmem") - get("active_file") - get("kernel")
        );
        figure
    };
    Ok(docker_figure)
}
