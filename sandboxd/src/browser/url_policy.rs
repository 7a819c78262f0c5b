//! Which URLs the browser API may open: `http`/`https` (and `about:blank`) to public addresses,
//! unless the configuration allows private ones.
//!
//! A URL's host is resolved here and every address it resolves to must be public: loopback,
//! private (RFC 1918, IPv6 unique-local), link-local (169.254.0.0/16 — including the cloud
//! metadata service at 169.254.169.254 — and fe80::/10), carrier-grade NAT (100.64.0.0/10),
//! unspecified, multicast, documentation, benchmarking and reserved ranges are refused, as are
//! IPv6 forms that embed such an IPv4 address (mapped, NAT64, 6to4). `SANDBOXD_BROWSER_ALLOW_PRIVATE`
//! lifts the address check; `SANDBOXD_BROWSER_ALLOW_HOSTS` allows listed host names and CIDRs.
//!
//! # Limits (honest ones)
//! - **DNS rebinding.** We resolve the name, then Chromium resolves it again on its own. A name
//!   whose DNS answer changes between the two look-ups (short TTL, attacker-controlled server)
//!   can pass this check and still reach a private address.
//! - **Only the first hop is checked.** Redirects, links the agent clicks, `back`/`forward`, and
//!   requests the page's own scripts make are not checked here; Chromium follows them.
//!
//! The check keeps a cooperative agent from wandering onto internal services by accident; it is
//! not a network boundary. Network isolation of the container is.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ipnet::IpNet;
use url::{Host, Url};

/// How long resolving a URL's host may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A URL the policy refused, and why.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{url} is not allowed: {reason}")]
pub struct Refusal {
    pub url: String,
    pub reason: String,
    /// The host could not be resolved, so it could not be checked (nor, most likely, opened).
    pub unresolvable: bool,
}

/// One entry of `SANDBOXD_BROWSER_ALLOW_HOSTS`: a host name (exact, case-insensitive) or an
/// address range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedHost {
    Name(String),
    Net(IpNet),
}

impl AllowedHost {
    /// Parses one entry: `10.0.0.0/8`, `127.0.0.1`, `::1`, `intranet.example`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty entry".into());
        }
        if let Ok(net) = text.parse::<IpNet>() {
            return Ok(Self::Net(net.trunc()));
        }
        let bare = text.trim_start_matches('[').trim_end_matches(']');
        if let Ok(addr) = bare.parse::<IpAddr>() {
            return Ok(Self::Net(IpNet::from(addr)));
        }
        let name = text.trim_end_matches('.').to_ascii_lowercase();
        let valid = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        if valid {
            Ok(Self::Name(name))
        } else {
            Err(format!(
                "{text:?} is neither a host name, an IP address nor a CIDR range"
            ))
        }
    }
}

/// The URL policy of the browser API.
#[derive(Debug, Clone, Default)]
pub struct UrlPolicy {
    /// Allow every address (`SANDBOXD_BROWSER_ALLOW_PRIVATE`).
    pub allow_private: bool,
    /// Host names and ranges allowed even when private (`SANDBOXD_BROWSER_ALLOW_HOSTS`).
    pub allow_hosts: Vec<AllowedHost>,
}

impl UrlPolicy {
    /// Parses `text` and checks it, resolving the host. Returns the parsed URL when allowed.
    pub async fn check(&self, text: &str) -> Result<Url, Refusal> {
        let refuse = |reason: String| Refusal {
            url: text.to_string(),
            reason,
            unresolvable: false,
        };
        let unresolvable = |reason: String| Refusal {
            unresolvable: true,
            ..refuse(reason)
        };
        let url = Url::parse(text.trim()).map_err(|e| refuse(format!("not a valid URL ({e})")))?;
        match url.scheme() {
            "http" | "https" => {}
            "about" if url.path() == "blank" => return Ok(url),
            scheme => {
                return Err(refuse(format!(
                    "the {scheme}: scheme is not allowed; only http and https URLs (and about:blank) can be opened"
                )));
            }
        }
        let host = url
            .host()
            .ok_or_else(|| refuse("the URL has no host".into()))?;
        let addresses: Vec<IpAddr> = match host {
            Host::Ipv4(v4) => vec![IpAddr::V4(v4)],
            Host::Ipv6(v6) => vec![IpAddr::V6(v6)],
            Host::Domain(name) => {
                if self.name_allowed(name) || self.allow_private {
                    return Ok(url);
                }
                let port = url.port_or_known_default().unwrap_or(80);
                let lookup = tokio::net::lookup_host((name, port));
                let resolved = tokio::time::timeout(RESOLVE_TIMEOUT, lookup)
                    .await
                    .map_err(|_| {
                        unresolvable(format!(
                            "resolving {name} took longer than {RESOLVE_TIMEOUT:?}"
                        ))
                    })?
                    .map_err(|e| unresolvable(format!("cannot resolve {name}: {e}")))?;
                let mut addresses: Vec<IpAddr> = resolved.map(|a| a.ip()).collect();
                addresses.dedup();
                if addresses.is_empty() {
                    return Err(unresolvable(format!("{name} resolves to no address")));
                }
                addresses
            }
        };
        if self.allow_private {
            return Ok(url);
        }
        for address in addresses {
            if self.address_allowed(address) {
                continue;
            }
            if let Some(kind) = non_public(address) {
                let via = match url.host() {
                    Some(Host::Domain(name)) => format!("{name} resolves to {address}, "),
                    _ => String::new(),
                };
                return Err(refuse(format!(
                    "{via}{address} is a {kind} address; private and local addresses are refused \
                     unless allowed by SANDBOXD_BROWSER_ALLOW_PRIVATE or SANDBOXD_BROWSER_ALLOW_HOSTS"
                )));
            }
        }
        Ok(url)
    }

    fn name_allowed(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.allow_hosts
            .iter()
            .any(|h| matches!(h, AllowedHost::Name(n) if *n == name))
    }

    fn address_allowed(&self, address: IpAddr) -> bool {
        let address = canonical(address);
        self.allow_hosts
            .iter()
            .any(|h| matches!(h, AllowedHost::Net(net) if net.contains(&address)))
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it stands for.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// What kind of non-public address this is, or `None` for a public one.
pub fn non_public(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

fn non_public_v4(a: Ipv4Addr) -> Option<&'static str> {
    let o = a.octets();
    let kind = if a.is_unspecified() || o[0] == 0 {
        "unspecified (0.0.0.0/8)"
    } else if a.is_loopback() {
        "loopback"
    } else if a.is_private() {
        "private (RFC 1918)"
    } else if a.is_link_local() {
        if o == [169, 254, 169, 254] {
            "link-local (cloud metadata service)"
        } else {
            "link-local"
        }
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        "carrier-grade NAT (100.64.0.0/10)"
    } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
        "IETF protocol assignment (192.0.0.0/24)"
    } else if a.is_documentation() {
        "documentation"
    } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
        "benchmarking (198.18.0.0/15)"
    } else if a.is_multicast() {
        "multicast"
    } else if a.is_broadcast() || o[0] >= 240 {
        "reserved"
    } else {
        return None;
    };
    Some(kind)
}

fn non_public_v6(a: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = a.to_ipv4_mapped() {
        return non_public_v4(v4);
    }
    let s = a.segments();
    let embedded_v4 =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    let kind = if a.is_unspecified() {
        "unspecified"
    } else if a.is_loopback() {
        "loopback"
    } else if (s[0] & 0xffc0) == 0xfe80 {
        "link-local (fe80::/10)"
    } else if (s[0] & 0xfe00) == 0xfc00 {
        "unique local (fc00::/7)"
    } else if (s[0] & 0xffc0) == 0xfec0 {
        "site-local (fec0::/10)"
    } else if a.is_multicast() {
        "multicast"
    } else if s[0] == 0x2001 && s[1] == 0x0db8 {
        "documentation (2001:db8::/32)"
    } else if s[0] == 0x0100 && s[1] == 0 && s[2] == 0 && s[3] == 0 {
        "discard-only (100::/64)"
    } else if s[0] == 0x0064 && s[1] == 0xff9b {
        // NAT64: the last 32 bits are an IPv4 address.
        return non_public_v4(embedded_v4(s[6], s[7]));
    } else if s[0] == 0x2002 {
        // 6to4: bits 16..48 are an IPv4 address.
        return non_public_v4(embedded_v4(s[1], s[2]));
    } else if s[..6] == [0, 0, 0, 0, 0, 0] {
        // IPv4-compatible (deprecated) ::a.b.c.d
        return non_public_v4(embedded_v4(s[6], s[7])).or(Some("IPv4-compatible"));
    } else {
        return None;
    };
    Some(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow_private: bool, hosts: &[&str]) -> UrlPolicy {
        UrlPolicy {
            allow_private,
            allow_hosts: hosts
                .iter()
                .map(|h| AllowedHost::parse(h).unwrap())
                .collect(),
        }
    }

    #[tokio::test]
    async fn only_http_https_and_about_blank() {
        let p = policy(true, &[]);
        for url in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "data:text/html,hi",
            "chrome://settings",
            "ftp://example.com/",
            "view-source:http://example.com",
            "about:config",
            "not a url",
        ] {
            let err = p.check(url).await.unwrap_err();
            assert_eq!(err.url, url);
            assert!(!err.reason.is_empty());
            assert!(!err.unresolvable);
        }
        assert!(p.check("about:blank").await.is_ok());
        assert!(policy(false, &[]).check("about:blank").await.is_ok());
    }

    #[tokio::test]
    async fn private_and_local_addresses_are_refused() {
        let p = policy(false, &[]);
        for (url, kind) in [
            ("http://127.0.0.1:8000/", "loopback"),
            ("http://localhost/", "loopback"),
            ("http://10.0.0.1/", "private"),
            ("http://172.16.5.4/", "private"),
            ("http://192.168.1.1/", "private"),
            ("http://169.254.169.254/latest/meta-data", "cloud metadata"),
            ("http://169.254.1.1/", "link-local"),
            ("http://100.64.0.1/", "carrier-grade NAT"),
            ("http://0.0.0.0/", "unspecified"),
            ("http://224.0.0.1/", "multicast"),
            ("http://[::1]/", "loopback"),
            ("http://[fe80::1]/", "link-local"),
            ("http://[fd00::1]/", "unique local"),
            ("http://[::ffff:10.0.0.1]/", "private"),
            ("http://[64:ff9b::a9fe:a9fe]/", "cloud metadata"),
            ("http://[2002:7f00:1::]/", "loopback"),
            ("http://2130706433/", "loopback"),
            ("http://0x7f.1/", "loopback"),
        ] {
            let err = p.check(url).await.unwrap_err();
            assert!(err.reason.contains(kind), "{url}: {}", err.reason);
            assert!(err.to_string().contains(url), "{err}");
        }
    }

    #[tokio::test]
    async fn public_addresses_pass() {
        let p = policy(false, &[]);
        for url in [
            "http://93.184.215.14/",
            "https://1.1.1.1/dns-query",
            "http://[2606:4700:4700::1111]/",
        ] {
            assert!(p.check(url).await.is_ok(), "{url}");
        }
    }

    #[tokio::test]
    async fn configuration_allows_hosts_ranges_or_everything() {
        let p = policy(false, &["127.0.0.1", "10.1.0.0/16", "Intranet.Example."]);
        assert!(p.check("http://127.0.0.1:8000/x").await.is_ok());
        assert!(p.check("http://10.1.2.3/").await.is_ok());
        assert!(p.check("http://10.2.0.1/").await.is_err());
        assert!(p.check("http://127.0.0.2/").await.is_err());
        assert!(p.check("http://intranet.example/").await.is_ok());
        assert!(p.check("http://[::ffff:127.0.0.1]/").await.is_ok());
        let open = policy(true, &[]);
        assert!(open.check("http://169.254.169.254/").await.is_ok());
        assert!(open.check("file:///etc/passwd").await.is_err());
    }

    #[tokio::test]
    async fn unresolvable_hosts_are_told_apart() {
        let err = policy(false, &[])
            .check("http://no-such-host.invalid/")
            .await
            .unwrap_err();
        assert!(err.unresolvable, "{err}");
        assert!(err.reason.contains("no-such-host.invalid"), "{err}");
    }

    #[test]
    fn allowed_host_entries() {
        assert_eq!(
            AllowedHost::parse("10.0.0.0/8").unwrap(),
            AllowedHost::Net("10.0.0.0/8".parse().unwrap())
        );
        assert_eq!(
            AllowedHost::parse("[::1]").unwrap(),
            AllowedHost::Net("::1/128".parse().unwrap())
        );
        assert_eq!(
            AllowedHost::parse("Example.COM").unwrap(),
            AllowedHost::Name("example.com".into())
        );
        assert!(AllowedHost::parse("http://x").is_err());
        assert!(AllowedHost::parse("a b").is_err());
        assert!(AllowedHost::parse("").is_err());
    }
}
