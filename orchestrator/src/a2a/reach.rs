//! Which addresses the A2A client may reach. A run's `model` (and an A2A message's
//! `metadata.model`) names a URL the orchestrator then fetches from the host it runs on: left
//! open, any key holder could make it probe the host's loopback services, the private network
//! or a cloud metadata endpoint. So only public addresses are reached, plus the ranges the
//! operator lists (`--a2a-remote-networks`, e.g. `127.0.0.0/8` for an agent on the same host).
//!
//! The check is made on the addresses a name resolves to, inside the HTTP client's resolver
//! ([`GuardedResolver`]), so the address checked is the address connected to (no window for a
//! DNS answer that changes in between); literal IPs in a URL, which skip the resolver, are
//! checked by [`Reach::check_url`], redirects by the client's redirect policy.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The addresses the client may connect to.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    /// Non-public ranges allowed besides the public internet.
    pub allowed: Vec<IpNet>,
}

impl Reach {
    pub fn new(allowed: Vec<IpNet>) -> Self {
        Self { allowed }
    }

    /// Whether `ip` may be connected to.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            ip => ip,
        };
        is_public(ip) || self.allowed.iter().any(|net| net.contains(&ip))
    }

    /// Refuses a URL whose host is a literal IP that may not be reached.
    pub fn check_url(&self, url: &Url) -> Result<(), String> {
        let host = url.host_str().unwrap_or_default();
        let literal = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok();
        match literal {
            Some(ip) if !self.permits(ip) => Err(refusal(ip)),
            _ => Ok(()),
        }
    }

    /// An HTTP client that reaches only what this permits (redirects included).
    pub fn client(&self) -> Result<reqwest::Client, String> {
        let reach = Arc::new(self.clone());
        let for_redirects = reach.clone();
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                return attempt.error("more than 5 redirects");
            }
            match for_redirects.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(refused) => attempt.error(Refused(refused)),
            }
        });
        reqwest::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver { reach }))
            .redirect(policy)
            .build()
            .map_err(|e| format!("the A2A client could not start: {e}"))
    }
}

/// An address the client may not reach: what the resolver answers for a name that has only
/// such addresses (found in a request error's source chain by [`refused_in`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The refusal behind a request error, if a [`Refused`] is in its source chain.
pub fn refused_in(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(refused) = error.downcast_ref::<Refused>() {
            return Some(refused.0.clone());
        }
        current = error.source();
    }
    None
}

fn refusal(ip: IpAddr) -> String {
    format!(
        "{ip} is not a public address; the A2A client reaches a host's own or a private \
         network only when the server allows it (--a2a-remote-networks)"
    )
}

/// Public: not loopback, private, link-local, shared (CGNAT), unspecified, broadcast,
/// documentation, benchmarking, multicast or reserved.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (18..20).contains(&b))
                || (a == 192 && b == 0))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0x0db8)
        }
    }
}

/// Resolves names with the system resolver and keeps only the addresses [`Reach`] permits; a
/// name left with none fails to resolve, saying why.
struct GuardedResolver {
    reach: Arc<Reach>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let reach = self.reach.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let permitted: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|addr| reach.permits(addr.ip()))
                .collect();
            if permitted.is_empty() {
                let why = match found.first() {
                    Some(addr) => Refused(format!("{host}: {}", refusal(addr.ip()))),
                    None => Refused(format!("{host} has no address")),
                };
                return Err(Box::new(why) as Box<dyn std::error::Error + Send + Sync>);
            }
            let addrs: Addrs = Box::new(permitted.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_and_allowed_ranges_are_reached() {
        let closed = Reach::default();
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.17.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!closed.permits(private.parse().unwrap()), "{private}");
        }
        for public in ["1.1.1.1", "93.184.216.34", "2606:4700::1111"] {
            assert!(closed.permits(public.parse().unwrap()), "{public}");
        }
        let open = Reach::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(open.permits("127.0.0.1".parse().unwrap()));
        assert!(!open.permits("10.0.0.1".parse().unwrap()));
        let url = Url::parse("http://169.254.169.254/latest/meta-data").unwrap();
        assert!(
            closed
                .check_url(&url)
                .unwrap_err()
                .contains("--a2a-remote-networks")
        );
        assert!(
            closed
                .check_url(&Url::parse("http://example.com/").unwrap())
                .is_ok()
        );
    }
}
