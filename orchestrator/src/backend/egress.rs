//! What sandboxes may reach on the network, enforced outside them with the host's iptables.
//!
//! An agent in a sandbox is an attacker: it must reach neither this host (the orchestrator, the
//! Docker API if exposed on TCP, anything listening on 0.0.0.0), nor other sandboxes, nor
//! private networks and cloud metadata (169.254.169.254). Every sandbox has a bridge network
//! of its own, and every such bridge's interface name starts with one prefix per orchestrator
//! network name ([`bridge_prefix`]), so two chains serve them all, hooked on that prefix
//! (iptables' `-i abxxxxxx+`) and so in force for a sandbox's bridge from the moment Docker
//! creates it:
//!
//! - `ABX-F-<hash>` in `DOCKER-USER` and `FORWARD` (both: Docker re-inserts its jump to
//!   `DOCKER-USER` now and then, see [`apply`]): traffic leaving through the host. Replies
//!   pass; allow-listed destinations pass; with [`EgressPolicy::Public`] private, loopback,
//!   link-local, CGNAT, benchmark, multicast and reserved ranges are refused and the rest (the
//!   internet) passes; with [`EgressPolicy::None`] everything is refused. Refused, not dropped
//!   (`REJECT`: the sender learns at once): Docker's embedded DNS forwards a sandbox's queries,
//!   from inside its network namespace, to the host's resolver, which is often at a private
//!   address; dropped, those queries hung until they timed out and Docker waited for them when it
//!   tore the container down, which made every removal take 4 s (2.87 s against 0.20 s measured
//!   with one container, bench/RESULTS.md).
//! - `ABX-I-<hash>` in `INPUT`: traffic to the host itself. Replies to connections the host
//!   opened (the orchestrator talking to sandboxd) pass; allow-listed destinations pass;
//!   everything else is dropped.
//!
//! The rules are rebuilt at every start (idempotent), and stay in place while the orchestrator
//! is down, since sandboxes keep running. Docker's resolver for a container answers inside the
//! container's own network namespace (and, on a network of one container, knows no one else);
//! names it forwards upstream resolve only when the host's resolver is at an address these
//! rules let through (a public one, or one in `--egress-allow`). IPv4 only: sandbox networks
//! are created without IPv6.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use sha2::{Digest, Sha256};

/// The policy (`--egress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EgressPolicy {
    /// The public internet only.
    Public,
    /// Nothing at all.
    None,
    /// No enforcement: sandboxes reach whatever the host's network allows (not recommended).
    Unrestricted,
}

/// Ranges a sandbox never reaches under [`EgressPolicy::Public`] (RFC 6890 special-purpose
/// blocks that are not globally reachable, plus multicast).
pub const BLOCKED_RANGES: [&str; 11] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// Errors applying the rules.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error(
        "cannot run iptables to enforce the egress policy ({0}); run the orchestrator as root or \
         with CAP_NET_ADMIN and iptables installed, or pass --egress unrestricted to skip it"
    )]
    Unavailable(String),
    #[error("iptables {args}: {message}")]
    Failed { args: String, message: String },
}

/// The rules for one orchestrator's sandbox networks.
#[derive(Debug, Clone)]
pub struct EgressRules {
    /// The bridge interfaces on the host, as iptables matches them: a prefix and `+`.
    pub interfaces: String,
    pub policy: EgressPolicy,
    pub allow: Vec<Ipv4Net>,
}

/// What every sandbox bridge of the orchestrator network name `network` starts with: `ab` and
/// 6 hex digits of a hash of the name (8 bytes).
pub fn bridge_prefix(network: &str) -> String {
    format!(
        "ab{}",
        hex::encode(&Sha256::digest(network.as_bytes())[..3])
    )
}

/// The bridge interface of one sandbox network (named `sandbox_network`): [`bridge_prefix`]
/// and 7 hex digits of a hash of its name (15 bytes, the most an interface name may have).
pub fn bridge_name(network: &str, sandbox_network: &str) -> String {
    let hash = hex::encode(&Sha256::digest(sandbox_network.as_bytes())[..4]);
    format!("{}{}", bridge_prefix(network), &hash[..7])
}

impl EgressRules {
    /// The rules for every sandbox bridge of the orchestrator network name `network`.
    pub fn for_network(network: &str, policy: EgressPolicy, allow: Vec<Ipv4Net>) -> Self {
        Self {
            interfaces: format!("{}+", bridge_prefix(network)),
            policy,
            allow,
        }
    }

    /// The iptables commands that unhook and delete both chains (when a network is removed for
    /// good); each may fail harmlessly if already done.
    pub fn teardown_commands(&self) -> Vec<Vec<String>> {
        let forward = self.forward_chain();
        let input = self.input_chain();
        let mut commands = Vec::new();
        commands.push(strings(&[
            "-D",
            "DOCKER-USER",
            "-i",
            &self.interfaces,
            "-j",
            &forward,
        ]));
        for hook in forward_hooks(self) {
            let mut delete = strings(&["-D", "FORWARD"]);
            delete.extend(hook);
            commands.push(delete);
        }
        commands.push(strings(&[
            "-D",
            "INPUT",
            "-i",
            &self.interfaces,
            "-j",
            &input,
        ]));
        for chain in [&forward, &input] {
            commands.push(strings(&["-F", chain]));
            commands.push(strings(&["-X", chain]));
        }
        commands
    }

    fn suffix(&self) -> String {
        hex::encode(&Sha256::digest(self.interfaces.as_bytes())[..4])
    }

    /// The chain for traffic through the host.
    pub fn forward_chain(&self) -> String {
        format!("ABX-F-{}", self.suffix())
    }

    /// The chain for traffic to the host.
    pub fn input_chain(&self) -> String {
        format!("ABX-I-{}", self.suffix())
    }

    /// The iptables commands (argument lists) that build both chains' contents.
    pub fn chain_rules(&self) -> Vec<Vec<String>> {
        let forward = self.forward_chain();
        let input = self.input_chain();
        let mut rules: Vec<Vec<String>> = Vec::new();
        let rule = |chain: &str, tail: &[&str]| -> Vec<String> {
            let mut args = vec!["-A".to_string(), chain.to_string()];
            args.extend(tail.iter().map(|s| s.to_string()));
            args
        };
        for chain in [&forward, &input] {
            rules.push(rule(
                chain,
                &[
                    "-m",
                    "conntrack",
                    "--ctstate",
                    "ESTABLISHED,RELATED",
                    "-j",
                    "RETURN",
                ],
            ));
            for net in &self.allow {
                rules.push(rule(chain, &["-d", &net.to_string(), "-j", "RETURN"]));
            }
        }
        match self.policy {
            EgressPolicy::Public => {
                for range in BLOCKED_RANGES {
                    rules.push(rule(&forward, &["-d", range, "-j", "REJECT"]));
                }
                rules.push(rule(&forward, &["-j", "RETURN"]));
            }
            EgressPolicy::None | EgressPolicy::Unrestricted => {
                rules.push(rule(&forward, &["-j", "REJECT"]));
            }
        }
        rules.push(rule(&input, &["-j", "DROP"]));
        rules
    }

    /// [`Self::chain_rules`] as one `iptables-restore --noflush` transaction: declaring a chain
    /// there creates it or empties it, and the rules that follow land in the same commit.
    pub fn restore_script(&self) -> String {
        let mut script = format!(
            "*filter\n:{} - [0:0]\n:{} - [0:0]\n",
            self.forward_chain(),
            self.input_chain()
        );
        for rule in self.chain_rules() {
            script.push_str(&rule.join(" "));
            script.push('\n');
        }
        script.push_str("COMMIT\n");
        script
    }
}

// The orchestrator runs no reaper (it is not a sandbox's PID 1, and `iptables` leaves no
// orphans behind): tokio waits for this child itself, as for no other. The host side's one spawn.
#[allow(clippy::disallowed_methods)]
async fn run(
    program: &str,
    args: &[String],
    input: Option<&[u8]>,
) -> Result<std::process::Output, EgressError> {
    use tokio::io::AsyncWriteExt;
    let unavailable = |e: std::io::Error| EgressError::Unavailable(format!("{program}: {e}"));
    let mut child = tokio::process::Command::new(program)
        .arg("-w")
        .args(args)
        .stdin(if input.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(unavailable)?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(input).await.map_err(unavailable)?;
    }
    child.wait_with_output().await.map_err(unavailable)
}

async fn iptables(args: &[String]) -> Result<std::process::Output, EgressError> {
    run("iptables", args, None).await
}

fn check(args: String, output: std::process::Output) -> Result<(), EgressError> {
    if output.status.success() {
        return Ok(());
    }
    let message = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if message.contains("Permission denied") || message.contains("you must be root") {
        return Err(EgressError::Unavailable(message));
    }
    Err(EgressError::Failed { args, message })
}

async fn must(args: &[String]) -> Result<(), EgressError> {
    check(args.join(" "), iptables(args).await?)
}

async fn succeeds(args: &[String]) -> Result<bool, EgressError> {
    Ok(iptables(args).await?.status.success())
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The two interchangeable forms of the `FORWARD` hook (told apart by a comment), so that
/// [`rehook_forward`] can put a new one on top before it deletes the old one by its spec.
fn forward_hooks(rules: &EgressRules) -> [Vec<String>; 2] {
    let chain = rules.forward_chain();
    ["a", "b"].map(|form| {
        strings(&[
            "-i",
            &rules.interfaces,
            "-m",
            "comment",
            "--comment",
            &format!("{chain}-{form}"),
            "-j",
            &chain,
        ])
    })
}

/// Puts the `FORWARD` hook back on top. Docker inserts every new network's own rules at the top
/// of `FORWARD`, among them `-i <bridge> ! -o <bridge> -j ACCEPT`: a hook left below them no
/// longer sees that bridge's traffic whenever Docker's `DOCKER-USER` jump is missing (it deletes
/// and re-inserts it around each network it creates). So after each sandbox network is made,
/// before any container is on it, the hook is inserted on top again (in the other of its two
/// forms) and the old one deleted: never a moment without one above the rest.
pub async fn rehook_forward(rules: &EgressRules) -> Result<(), EgressError> {
    if rules.policy == EgressPolicy::Unrestricted {
        return Ok(());
    }
    let [a, b] = forward_hooks(rules);
    let mut check = strings(&["-C", "FORWARD"]);
    check.extend(a.iter().cloned());
    let (new, old) = if succeeds(&check).await? {
        (b, a)
    } else {
        (a, b)
    };
    let mut insert = strings(&["-I", "FORWARD", "1"]);
    insert.extend(new);
    must(&insert).await?;
    // Every copy of the old form (none when there was none).
    let mut delete = strings(&["-D", "FORWARD"]);
    delete.extend(old);
    while succeeds(&delete).await? {}
    Ok(())
}

/// Builds (or rebuilds) the chains and hooks them in, first in their parent chains.
pub async fn apply(rules: &EgressRules) -> Result<(), EgressError> {
    if rules.policy == EgressPolicy::Unrestricted {
        tracing::warn!(interfaces = %rules.interfaces, "--egress unrestricted: sandboxes can reach this host, other sandboxes and private networks");
        return Ok(());
    }
    let forward = rules.forward_chain();
    let input = rules.input_chain();
    // Both chains' contents in one transaction: a rebuild (at every start, with sandboxes
    // running) never leaves a chain empty, which would let everything through for a moment.
    let script = rules.restore_script();
    check(
        "iptables-restore --noflush".to_string(),
        run(
            "iptables-restore",
            &strings(&["--noflush"]),
            Some(script.as_bytes()),
        )
        .await?,
    )?;
    // Hooked into FORWARD itself as well as DOCKER-USER: Docker deletes and re-inserts its
    // `FORWARD -j DOCKER-USER` jump whenever it creates a network, and a first packet sent in
    // that moment would pass Docker's own ACCEPT rules (and its connection every reply rule
    // after it). Docker never removes other rules from FORWARD.
    let mut hooks = Vec::new();
    if succeeds(&strings(&["-L", "DOCKER-USER", "-n"])).await? {
        hooks.push(("DOCKER-USER", &forward));
    }
    hooks.push(("INPUT", &input));
    rehook_forward(rules).await?;
    for (parent, chain) in hooks {
        let hook = strings(&["-i", &rules.interfaces, "-j", chain]);
        let mut check = strings(&["-C", parent]);
        check.extend(hook.iter().cloned());
        if !succeeds(&check).await? {
            let mut insert = strings(&["-I", parent, "1"]);
            insert.extend(hook);
            must(&insert).await?;
        }
    }
    tracing::info!(interfaces = %rules.interfaces, policy = ?rules.policy, allow = ?rules.allow, "egress rules in place");
    Ok(())
}

/// Whether an address is one a sandbox may reach under `Public` without an allow-list entry.
pub fn is_public(address: Ipv4Addr) -> bool {
    !BLOCKED_RANGES
        .iter()
        .filter_map(|r| r.parse::<Ipv4Net>().ok())
        .any(|net| net.contains(&address))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_policy_drops_private_ranges_and_the_host() {
        let rules = EgressRules {
            interfaces: "ab123456+".into(),
            policy: EgressPolicy::Public,
            allow: vec!["10.9.0.0/16".parse().unwrap()],
        };
        let text: Vec<String> = rules.chain_rules().iter().map(|r| r.join(" ")).collect();
        let forward = rules.forward_chain();
        let input = rules.input_chain();
        assert!(forward.len() <= 28 && input.len() <= 28);
        // Allow-list before the drops; replies first of all.
        let position = |needle: &str| text.iter().position(|r| r == needle).unwrap();
        let replies = position(&format!(
            "-A {forward} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN"
        ));
        let allowed = position(&format!("-A {forward} -d 10.9.0.0/16 -j RETURN"));
        let private = position(&format!("-A {forward} -d 10.0.0.0/8 -j REJECT"));
        let metadata = position(&format!("-A {forward} -d 169.254.0.0/16 -j REJECT"));
        assert!(replies < allowed && allowed < private && private < metadata);
        assert_eq!(text.last().unwrap(), &format!("-A {input} -j DROP"));
        assert!(text.contains(&format!("-A {forward} -j RETURN")));
    }

    #[test]
    fn none_policy_drops_everything() {
        let rules = EgressRules {
            interfaces: "ab000001+".into(),
            policy: EgressPolicy::None,
            allow: vec![],
        };
        let text: Vec<String> = rules.chain_rules().iter().map(|r| r.join(" ")).collect();
        assert!(text.contains(&format!("-A {} -j REJECT", rules.forward_chain())));
        assert!(
            !text
                .iter()
                .any(|r| r.ends_with("-j RETURN") && !r.contains("ctstate"))
        );
    }

    #[test]
    fn the_chains_are_rebuilt_in_one_transaction() {
        let rules = EgressRules {
            interfaces: "ab000001+".into(),
            policy: EgressPolicy::Public,
            allow: vec!["10.9.0.0/16".parse().unwrap()],
        };
        let script = rules.restore_script();
        let lines: Vec<&str> = script.lines().collect();
        assert_eq!(lines[0], "*filter");
        assert_eq!(lines[1], format!(":{} - [0:0]", rules.forward_chain()));
        assert_eq!(lines[2], format!(":{} - [0:0]", rules.input_chain()));
        assert_eq!(lines.last(), Some(&"COMMIT"));
        let body: Vec<String> = rules.chain_rules().iter().map(|r| r.join(" ")).collect();
        assert_eq!(lines[3..lines.len() - 1], body[..]);
        // Every argument is one word: joined with spaces, the rules parse back as they were.
        assert!(
            rules
                .chain_rules()
                .iter()
                .flatten()
                .all(|a| !a.contains(char::is_whitespace))
        );
    }

    #[test]
    fn every_sandbox_bridge_of_a_network_matches_its_rules_and_no_other_networks() {
        let rules = EgressRules::for_network("agentbox", EgressPolicy::Public, vec![]);
        let prefix = rules.interfaces.trim_end_matches('+');
        assert_eq!(rules.interfaces, format!("{prefix}+"));
        for sandbox in ["sbx_1", "sbx_2", "a-much-longer-sandbox-id-than-usual"] {
            let bridge = bridge_name("agentbox", sandbox);
            assert_eq!(
                bridge.len(),
                15,
                "{bridge}: the most an interface name may have"
            );
            assert!(bridge.starts_with(prefix), "{bridge}");
            assert!(!bridge_name("agentbox-other", sandbox).starts_with(prefix));
        }
        assert_ne!(
            bridge_name("agentbox", "sbx_1"),
            bridge_name("agentbox", "sbx_2")
        );
        // Docker's own bridges never match.
        assert!(!"docker0".starts_with(prefix) && !"br-0123456789ab".starts_with(prefix));
    }

    #[test]
    fn public_means_not_in_a_special_range() {
        for private in [
            "10.1.2.3",
            "172.17.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "127.0.0.1",
            "100.64.1.1",
            "224.0.0.251",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["1.1.1.1", "198.51.100.7", "203.0.113.9", "8.8.8.8"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }
}
