//! The `[http_targets] allow` list of the server configuration (docs/configuration.md,
//! `[http_targets]`): the hosts HTTP targets may reach, and the rules of an HTTP target's URL
//! that the list judges (`target.url`: its length, scheme, host and port), written as methods
//! of the validation walker (`walker.rs`).
//!
//! A pattern is one of:
//! - a host name, `billing.internal`: that name exactly;
//! - a wildcard, `*.internal`: every name that ends in `.internal` (not `internal` itself);
//! - an address, `10.1.2.3` or `::1`: that address;
//! - a network, `10.0.0.0/8` or `fd00::/8` (CIDR, RFC 4632 and RFC 4291 §2.3): every address in it.
//!
//! Names compare without regard to case and without a trailing dot (RFC 4343; RFC 1034 §3.1).
//!
//! Invariants:
//! - A host is allowed by a name pattern, or by an address or network pattern, never by
//!   anything else: a list with no pattern that matches refuses the host.
//! - A name that no name pattern matches is allowed only through its addresses
//!   ([`Verdict::ByAddress`]); whoever connects must then connect only to resolved addresses
//!   that [`HostAllowList::allows_ip`] accepts, so a name cannot lead past the list by
//!   resolving elsewhere (DNS rebinding).

use std::net::IpAddr;

use ipnet::IpNet;

use crate::walker::Walker;

/// Longest pattern, in bytes (253, the longest DNS name, RFC 1035 §2.3.4, as text).
pub const MAX_PATTERN_LEN: usize = 253;

/// The hosts HTTP targets may reach. Built once from the configuration, read on every job
/// write and every HTTP attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostAllowList {
    /// Exact names, lower-case, without a trailing dot.
    names: Vec<String>,
    /// Wildcard suffixes with their leading dot (`.internal` for `*.internal`), lower-case.
    suffixes: Vec<String>,
    /// Addresses (as /32 or /128) and networks.
    nets: Vec<IpNet>,
    /// The patterns as configured, for messages.
    patterns: Vec<String>,
}

/// What the list says of one URL host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A name pattern matches the name, or the address is in the list.
    Allowed,
    /// The host is a name no name pattern matches and the list has address patterns: it is
    /// allowed only at the resolved addresses the list holds.
    ByAddress,
    /// Nothing in the list can allow the host.
    Refused,
}

impl HostAllowList {
    /// The list of `patterns` (see the module doc).
    ///
    /// # Errors
    /// `(index, reason)` for the first pattern that is none of the four forms, or is longer
    /// than [`MAX_PATTERN_LEN`]; an empty list is refused too (index 0), since it would
    /// refuse every HTTP target.
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<Self, (usize, String)> {
        if patterns.is_empty() {
            return Err((
                0,
                "the list is empty, which would refuse every HTTP target; name at least one host or network, or leave the list out".into(),
            ));
        }
        let mut list = HostAllowList::default();
        for (i, pattern) in patterns.iter().enumerate() {
            let p = pattern.as_ref().trim();
            list.patterns.push(p.to_owned());
            if p.len() > MAX_PATTERN_LEN {
                return Err((i, format!("is longer than {MAX_PATTERN_LEN} bytes")));
            }
            if let Ok(net) = p.parse::<IpNet>() {
                if net.trunc() != net {
                    return Err((
                        i,
                        format!(
                            "'{p}' has bits set past its prefix length; the network is {}",
                            net.trunc()
                        ),
                    ));
                }
                list.nets.push(unmapped(net));
            } else if let Ok(ip) = p.parse::<IpAddr>() {
                list.nets.push(unmapped(IpNet::from(ip)));
            } else if p.contains('/') {
                return Err((
                    i,
                    format!("'{p}' is not a network like 10.0.0.0/8 or fd00::/8"),
                ));
            } else if p.starts_with('[') {
                return Err((
                    i,
                    format!("'{p}': write an IPv6 address without brackets, as in fd00::1"),
                ));
            } else if let Some(suffix) = p.strip_prefix("*.") {
                check_name(suffix).map_err(|m| (i, format!("'{p}': {m}")))?;
                list.suffixes.push(format!(".{}", normal_name(suffix)));
            } else {
                check_name(p).map_err(|m| (i, format!("'{p}': {m}")))?;
                list.names.push(normal_name(p));
            }
        }
        Ok(list)
    }

    /// Whether a name pattern matches `name` (a DNS name, not an address literal).
    pub fn allows_name(&self, name: &str) -> bool {
        let name = normal_name(name);
        self.names.contains(&name)
            || self
                .suffixes
                .iter()
                .any(|s| name.len() > s.len() && name.ends_with(s.as_str()))
    }

    /// Whether an address or network pattern holds `ip`. An IPv4-mapped IPv6 address
    /// (`::ffff:10.1.2.3`, RFC 4291 §2.5.5.2) is judged as the IPv4 address it maps.
    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The verdict on a URL's host: a name (`billing.internal`), or an address literal,
    /// bracketed or not (`10.1.2.3`, `[::1]`).
    pub fn judge(&self, host: &str) -> Verdict {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return if self.allows_ip(ip) {
                Verdict::Allowed
            } else {
                Verdict::Refused
            };
        }
        if self.allows_name(host) {
            Verdict::Allowed
        } else if self.nets.is_empty() {
            Verdict::Refused
        } else {
            Verdict::ByAddress
        }
    }

    /// The patterns as configured, comma-separated, for messages.
    pub fn describe(&self) -> String {
        self.patterns.join(", ")
    }
}

/// An IPv4-mapped IPv6 network (`::ffff:10.0.0.0/104`, RFC 4291 §2.5.5.2) as the IPv4
/// network it maps, since [`HostAllowList::allows_ip`] judges mapped addresses as IPv4.
fn unmapped(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96)
                .map(IpNet::V4)
                .unwrap_or(net),
            None => net,
        },
        other => other,
    }
}

fn normal_name(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// A DNS name of letters, digits, `-` and `.` (RFC 1123 §2.1 host names, plus `_`, which
/// service names use), without empty labels.
///
/// A name whose last label is a number (`127.1`, `0x7f.1`) is refused: URL parsers read such a
/// host as an IPv4 address (WHATWG URL, "ends in a number"), so the pattern could never match.
fn check_name(name: &str) -> Result<(), String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.split('.').any(str::is_empty) {
        return Err("is not a host name (an empty label)".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
    {
        return Err(match c {
            ':' => {
                "names a port or is an address; a pattern is a host, an address or a network".into()
            }
            '*' => "is not a host name (a wildcard may only lead, as in *.internal)".into(),
            c if !c.is_ascii() => {
                "is not a host name in ASCII; write an internationalized name in its xn-- form"
                    .into()
            }
            c => format!("is not a host name ('{c}')"),
        });
    }
    if let Some(label) = name
        .split('.')
        .find(|l| l.starts_with('-') || l.ends_with('-') || l.len() > 63)
    {
        return Err(format!(
            "is not a host name (the label '{label}' begins or ends with '-' or is longer than 63 bytes, RFC 1035 §2.3.1)"
        ));
    }
    let last = name.rsplit('.').next().unwrap_or_default();
    let hex = last
        .strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|h| h.chars().all(|c| c.is_ascii_hexdigit()));
    if hex || last.chars().all(|c| c.is_ascii_digit()) {
        return Err(
            "is neither a host name nor an address (write an address in full, as in 127.0.0.1)"
                .into(),
        );
    }
    Ok(())
}

/// Longest HTTP target URL, in bytes: 8,000, the least that RFC 9110 §4.1 recommends every
/// sender and recipient support. A longer URL may be refused by the receiver or a proxy on
/// the way (reqwest itself cannot send one past 65,534 bytes), so it is refused when the job
/// is written rather than failing every attempt.
pub const MAX_URL_LEN: usize = 8_000;

impl Walker {
    /// `target.url`: an absolute http(s) URL of at most [`MAX_URL_LEN`] bytes with a host, a
    /// valid port, and a host name a resolver can look up; with `allow`, a host the
    /// `[http_targets] allow` list can allow. Errors go to `target.url`, one at the most.
    pub(crate) fn check_url(&mut self, url: &str, allow: Option<&HostAllowList>) {
        if url.len() > MAX_URL_LEN {
            self.err(
                "target.url",
                format!(
                    "is {} bytes long; at most {MAX_URL_LEN} are allowed",
                    url.len()
                ),
            );
            return;
        }
        // The scheme is case-insensitive (RFC 3986 §3.1): `HTTP://` is `http://`.
        let rest = url.split_once("://").and_then(|(scheme, rest)| {
            (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
                .then_some(rest)
        });
        let Some(rest) = rest else {
            self.err(
                "target.url",
                format!("'{url}' must be an absolute http:// or https:// URL"),
            );
            return;
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host = authority.rsplit('@').next().unwrap_or("");
        if host.is_empty() || host.starts_with(':') {
            self.err("target.url", format!("'{url}' has no host"));
        } else if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            self.err(
                "target.url",
                "must not contain spaces or control characters",
            );
        } else if let Some((_, port)) = host.rsplit_once(':')
            && !host.ends_with(']')
            && port.parse::<u16>().is_err()
        {
            self.err("target.url", format!("'{port}' is not a port number"));
        } else {
            // The host as the HTTP client sees it: lower-case, IDNA-mapped (UTS #46).
            match url::Url::parse(url) {
                Ok(parsed) => self.check_host(&parsed, allow),
                Err(e) if allow.is_some() => {
                    self.err("target.url", format!("is not a valid URL: {e}"));
                }
                Err(_) => {}
            }
        }
    }

    /// The parsed URL's host: a name a resolver can look up (RFC 1035 §2.3.4: no resolver
    /// looks up a longer one, so every attempt would fail), and one the `[http_targets]
    /// allow` list can allow. A name that only an address pattern could allow passes here;
    /// the HTTP target connects only to its resolved addresses that the list holds.
    pub(crate) fn check_host(&mut self, parsed: &url::Url, allow: Option<&HostAllowList>) {
        if let Some(url::Host::Domain(name)) = parsed.host() {
            let name = name.strip_suffix('.').unwrap_or(name);
            if name.len() > 253 {
                self.err(
                    "target.url",
                    format!(
                        "the host is {} bytes long; at most 253 are allowed (RFC 1035)",
                        name.len()
                    ),
                );
                return;
            } else if name.split('.').any(|label| label.len() > 63) {
                self.err(
                    "target.url",
                    "the host has a label longer than 63 bytes (RFC 1035)",
                );
                return;
            }
        }
        let Some(allow) = allow else { return };
        let Some(host) = parsed.host_str() else {
            self.err("target.url", "has no host");
            return;
        };
        if allow.judge(host) == Verdict::Refused {
            self.err(
                "target.url",
                format!(
                    "host '{host}' is not in the server's [http_targets] allow list ({})",
                    allow.describe()
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(patterns: &[&str]) -> HostAllowList {
        HostAllowList::parse(patterns).unwrap()
    }

    #[test]
    fn the_four_forms_of_a_pattern() {
        let l = list(&[
            "billing.example.com",
            "*.internal",
            "192.0.2.7",
            "10.0.0.0/8",
            "fd00::/8",
        ]);
        assert_eq!(l.judge("billing.example.com"), Verdict::Allowed);
        assert_eq!(l.judge("BILLING.example.com."), Verdict::Allowed);
        assert_eq!(l.judge("a.b.internal"), Verdict::Allowed);
        assert_eq!(l.judge("10.200.0.1"), Verdict::Allowed);
        assert_eq!(l.judge("192.0.2.7"), Verdict::Allowed);
        assert_eq!(l.judge("[fd12::1]"), Verdict::Allowed);
        assert_eq!(l.judge("192.0.2.8"), Verdict::Refused);
        assert_eq!(l.judge("[::1]"), Verdict::Refused);
        assert_eq!(l.judge("127.0.0.1"), Verdict::Refused);
        // A name no name pattern matches may still resolve into 10.0.0.0/8.
        assert_eq!(l.judge("internal"), Verdict::ByAddress);
        assert_eq!(l.judge("evil-internal"), Verdict::ByAddress);
    }

    #[test]
    fn without_networks_an_unmatched_name_is_refused() {
        let l = list(&["*.internal"]);
        assert_eq!(l.judge("x.internal"), Verdict::Allowed);
        assert_eq!(l.judge("internal"), Verdict::Refused);
        assert_eq!(l.judge("x.internal.evil.com"), Verdict::Refused);
        assert_eq!(l.judge("10.0.0.1"), Verdict::Refused);
    }

    #[test]
    fn an_ipv4_mapped_address_is_judged_as_its_ipv4_address() {
        let l = list(&["10.0.0.0/8"]);
        assert!(l.allows_ip("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!l.allows_ip("::ffff:127.0.0.1".parse().unwrap()));
        // A mapped pattern allows the IPv4 address, in either spelling.
        let l = list(&["::ffff:10.1.2.3"]);
        assert_eq!(l.judge("10.1.2.3"), Verdict::Allowed);
        assert_eq!(l.judge("[::ffff:a01:203]"), Verdict::Allowed);
        assert_eq!(l.judge("10.1.2.4"), Verdict::Refused);
    }

    #[test]
    fn bad_patterns_are_named_by_index() {
        for (patterns, index) in [
            (&["ok.example", "10.0.0.0/33"][..], 1),
            (&["a*.internal"][..], 0),
            (&["ok", "*"][..], 1),
            (&["bad..name"][..], 0),
            (&["host/path"][..], 0),
            (&["127.1"][..], 0),
            (&["0x7f.0.0.2"][..], 0),
            (&["1.2.3"][..], 0),
            (&["10.0.0.1/8"][..], 0),
            (&["-a.b"][..], 0),
            (&["[::1]"][..], 0),
            (&["a.b:80"][..], 0),
            (&["ünicode.de"][..], 0),
        ] {
            let (i, reason) = HostAllowList::parse(patterns).unwrap_err();
            assert_eq!(i, index, "{patterns:?}: {reason}");
        }
        let empty: [&str; 0] = [];
        assert!(HostAllowList::parse(&empty).is_err());
    }
}
