//! Server configuration: flags, then `SUNDIAL_*` environment variables, then the TOML file
//! given with `--config` (docs/configuration.md), then defaults.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;
use sundial_api::auth::{ApiToken, Tokens};
use sundial_core::allow::HostAllowList;
use sundial_store::maintenance::MaintenanceConfig;
use sundial_target::{ConnectionKind, Endpoint};

use sundial_worker::AlertRule;

use crate::listener::HttpLimits;

/// Every role a process can run.
pub const ROLES: [&str; 3] = ["api", "scheduler", "worker"];

/// `sundial server` flags.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Roles to run, comma-separated: api, scheduler, worker [default: all]
    #[arg(long, env = "SUNDIAL_ROLES", value_delimiter = ',')]
    pub roles: Option<Vec<String>>,
    /// Store URL: sqlite://PATH (embedded) or postgres://... (shared) [default: sqlite://sundial.db]
    #[arg(long, env = "SUNDIAL_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Address the API (or, without the api role, /healthz and /readyz) listens on [default: 127.0.0.1:8080]
    #[arg(long, env = "SUNDIAL_LISTEN")]
    pub listen: Option<String>,
    /// This node's id [default: the host name and process id]
    #[arg(long, env = "SUNDIAL_NODE_ID")]
    pub node_id: Option<String>,
    /// TOML configuration file
    #[arg(long, env = "SUNDIAL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Shard lease time to live, e.g. 10s [default: 10s]
    #[arg(long, env = "SUNDIAL_LEASE_TTL", allow_hyphen_values = true)]
    pub lease_ttl: Option<String>,
    /// On SIGTERM, how long running attempts get to finish before what is left is handed
    /// back to the other workers, 0s-10m [default: 25s]
    #[arg(long, env = "SUNDIAL_SHUTDOWN_GRACE", allow_hyphen_values = true)]
    pub shutdown_grace: Option<String>,
    /// Most deliveries one worker runs at once (1-100000) [default: 1024]
    #[arg(long, env = "SUNDIAL_MAX_IN_FLIGHT", allow_hyphen_values = true)]
    pub max_in_flight: Option<String>,
    /// How long before their fire time a worker claims executions and holds them until it,
    /// 0s-10s; 0s claims only due ones [default: 1s]
    #[arg(long, env = "SUNDIAL_CLAIM_AHEAD", allow_hyphen_values = true)]
    pub claim_ahead: Option<String>,
    /// Most executions one worker holds after claiming them ahead (0-1000000); 0 claims only
    /// due ones [default: 100000]
    #[arg(long, env = "SUNDIAL_MAX_CLAIMED_AHEAD", allow_hyphen_values = true)]
    pub max_claimed_ahead: Option<String>,
    /// How long before their fire time the scheduler writes slots' executions, 2s-60s
    /// [default: 5s]
    #[arg(long, env = "SUNDIAL_LOOKAHEAD", allow_hyphen_values = true)]
    pub lookahead: Option<String>,
}

/// `sundial migrate` flags.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// Store URL [default: sqlite://sundial.db]
    #[arg(long, env = "SUNDIAL_DATABASE_URL")]
    pub database_url: Option<String>,
}

/// The configuration file's shape (docs/configuration.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    database_url: Option<String>,
    listen: Option<String>,
    node_id: Option<String>,
    roles: Option<Vec<String>>,
    lease_ttl: Option<String>,
    shutdown_grace: Option<String>,
    max_in_flight: Option<toml::Value>,
    claim_ahead: Option<toml::Value>,
    max_claimed_ahead: Option<toml::Value>,
    lookahead: Option<toml::Value>,
    #[serde(default)]
    connections: BTreeMap<String, ConnectionConfig>,
    #[serde(default)]
    namespaces: BTreeMap<String, NamespaceConfig>,
    #[serde(default)]
    tokens: Vec<TokenConfig>,
    #[serde(default)]
    http_targets: Option<HttpTargetsConfig>,
    #[serde(default)]
    maintenance: MaintenanceFile,
    #[serde(default)]
    http: HttpFile,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    #[serde(default)]
    insecure_http: bool,
    #[serde(default)]
    alerts: Vec<AlertFile>,
    public_url: Option<String>,
    history_retention: Option<String>,
    /// How long audit log entries are kept (docs/configuration.md, `audit_retention`).
    audit_retention: Option<String>,
    #[serde(default)]
    signing_keys: Vec<crate::signing::SigningKeyFile>,
    secrets_key_file: Option<PathBuf>,
}

/// One `[[alerts]]` entry (docs/configuration.md, "`[[alerts]]`"), checked by
/// [`resolve_alerts`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AlertFile {
    name: Option<String>,
    on: Option<Vec<String>>,
    namespaces: Option<Vec<String>>,
    target: Option<serde_json::Value>,
}

/// `[http]` (docs/configuration.md, "`[http]`"): the listener's limits; each left out keeps
/// its default ([`crate::listener::HttpLimits`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    header_read_timeout: Option<String>,
    request_body_timeout: Option<String>,
    keep_alive_timeout: Option<String>,
    max_connections: Option<usize>,
}

impl HttpFile {
    /// The limits, over the defaults.
    ///
    /// # Errors
    /// `http.KEY: ...` for a duration that does not parse or is under 100ms, or a connection
    /// cap outside 1-1000000.
    fn resolve(&self) -> anyhow::Result<HttpLimits> {
        let duration = |key: &str,
                        text: &Option<String>,
                        default: std::time::Duration|
         -> anyhow::Result<std::time::Duration> {
            let Some(text) = text else { return Ok(default) };
            let d: sundial_core::Dur = text
                .parse()
                .map_err(|e| anyhow::anyhow!("http.{key}: {e}"))?;
            if d.as_millis() < 100 {
                bail!("http.{key}: {d} is shorter than the minimum of 100ms");
            }
            Ok(std::time::Duration::from_millis(d.as_millis()))
        };
        let defaults = HttpLimits::default();
        let max_connections = self.max_connections.unwrap_or(defaults.max_connections);
        if !(1..=1_000_000).contains(&max_connections) {
            bail!("http.max_connections: {max_connections} is out of range 1-1000000");
        }
        Ok(HttpLimits {
            header_read_timeout: duration(
                "header_read_timeout",
                &self.header_read_timeout,
                defaults.header_read_timeout,
            )?,
            request_body_timeout: duration(
                "request_body_timeout",
                &self.request_body_timeout,
                defaults.request_body_timeout,
            )?,
            keep_alive_timeout: duration(
                "keep_alive_timeout",
                &self.keep_alive_timeout,
                defaults.keep_alive_timeout,
            )?,
            max_connections,
        })
    }
}

/// `[maintenance]` (docs/configuration.md, "`[maintenance]`"): the periods of the maintenance
/// services, as duration strings; each left out keeps its default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MaintenanceFile {
    reaper_every: Option<String>,
    queue_vacuum_every: Option<String>,
    checkpoint_every: Option<String>,
    node_heartbeat_every: Option<String>,
    alerts_every: Option<String>,
    retention_every: Option<String>,
}

impl MaintenanceFile {
    /// The periods, over the defaults of `sundial_store::maintenance`.
    ///
    /// # Errors
    /// `maintenance.KEY: ...` for a value that is not a duration or is zero.
    fn resolve(&self) -> anyhow::Result<MaintenanceConfig> {
        let parse =
            |key: &str, text: &Option<String>| -> anyhow::Result<Option<sundial_core::Dur>> {
                text.as_deref()
                    .map(|t| {
                        t.parse::<sundial_core::Dur>()
                            .map_err(|e| anyhow::anyhow!("maintenance.{key}: {e}"))
                    })
                    .transpose()
            };
        let defaults = MaintenanceConfig::default();
        let config = MaintenanceConfig {
            reaper_every: parse("reaper_every", &self.reaper_every)?
                .unwrap_or(defaults.reaper_every),
            queue_vacuum_every: parse("queue_vacuum_every", &self.queue_vacuum_every)?
                .unwrap_or(defaults.queue_vacuum_every),
            checkpoint_every: parse("checkpoint_every", &self.checkpoint_every)?
                .unwrap_or(defaults.checkpoint_every),
            node_heartbeat_every: parse("node_heartbeat_every", &self.node_heartbeat_every)?,
            retention_every: parse("retention_every", &self.retention_every)?
                .unwrap_or(defaults.retention_every),
        };
        if parse("alerts_every", &self.alerts_every)?.is_some_and(sundial_core::Dur::is_zero) {
            bail!("maintenance.alerts_every: must be more than 0s");
        }
        config
            .validate()
            .map_err(|(key, reason)| anyhow::anyhow!("maintenance.{key}: {reason}"))?;
        Ok(config)
    }
}

/// One `[[tokens]]` entry (README.md "The API", docs/configuration.md), checked by [`ApiToken::parse`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenConfig {
    /// The name the audit log records the token's changes under (a name as for jobs); by
    /// default `token-` and the first 8 hexadecimal digits of `token_sha256`.
    name: Option<String>,
    /// The SHA-256 of the token, 64 hexadecimal digits.
    token_sha256: String,
    /// `admin`, `editor` or `viewer`.
    role: String,
    /// Namespace names, or `["*"]`.
    namespaces: Vec<String>,
}

/// `[http_targets]` (docs/configuration.md): which hosts HTTP targets may reach, and how many
/// connections a worker keeps open to each.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpTargetsConfig {
    /// Host names, `*.suffix` wildcards, addresses and CIDR networks
    /// ([`sundial_core::allow::HostAllowList`]).
    allow: Option<Vec<String>>,
    /// Most requests in flight to one host from one worker (1-100000; default
    /// [`sundial_target::DEFAULT_MAX_CONNECTIONS_PER_HOST`]).
    max_connections_per_host: Option<usize>,
}

/// A named connection: a broker or container engine jobs may use (`[connections.NAME]`,
/// docs/configuration.md). Its type and URL scheme are checked when the configuration is resolved; a
/// process running the worker role also connects to it at start and refuses to start when
/// it cannot ([`sundial_target::Targets::connect`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionConfig {
    /// `nats`, `amqp`, `redis` or `container`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Where it is: a URL whose scheme fits the type (see
    /// [`sundial_target::ConnectionKind::schemes`]).
    pub url: String,
}

impl ConnectionConfig {
    /// The checked definition.
    ///
    /// # Errors
    /// `type: ...` for an unknown type, `url: ...` for a URL that is not of the type's
    /// schemes; the caller prefixes `connections.NAME.`.
    pub fn endpoint(&self) -> anyhow::Result<Endpoint> {
        let kind: ConnectionKind = self
            .kind
            .parse()
            .map_err(|e: String| anyhow::anyhow!("type: {e}"))?;
        if !kind.accepts_url(&self.url) {
            bail!(
                "url: '{}' is not a {kind} URL (it must start with {})",
                sundial_target::redact(&self.url),
                kind.schemes().join(" or ")
            );
        }
        let rest = kind
            .schemes()
            .iter()
            .find_map(|s| self.url.strip_prefix(s))
            .unwrap_or_default();
        if rest.trim_matches('/').is_empty() {
            bail!(
                "url: '{}' names no host or socket",
                sundial_target::redact(&self.url)
            );
        }
        Ok(Endpoint {
            kind,
            url: self.url.clone(),
        })
    }
}

/// `[namespaces.NAME]`: per-namespace settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespaceConfig {
    /// Executions the namespace may start per second, across every worker.
    max_dispatch_per_second: Option<f64>,
}

/// The resolved server configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Roles to run.
    pub roles: Vec<String>,
    /// Store URL.
    pub database_url: String,
    /// API address.
    pub listen: SocketAddr,
    /// Node id.
    pub node_id: String,
    /// Named connections.
    pub connections: BTreeMap<String, ConnectionConfig>,
    /// Shard lease time to live.
    pub lease_ttl: sundial_core::Dur,
    /// `shutdown_grace`: how long a stopping worker lets its attempts finish before it hands
    /// what is left back (docs/operations.md, "Stopping and rolling restarts").
    pub shutdown_grace: sundial_core::Dur,
    /// Per-namespace dispatch limits, executions per second.
    pub rate_limits: BTreeMap<String, f64>,
    /// Most deliveries one worker runs at once.
    pub max_in_flight: usize,
    /// How long before its fire time a worker may claim an execution (docs/guarantees.md,
    /// "Claim ahead"); zero: only due ones.
    pub claim_ahead: sundial_core::Dur,
    /// Most executions a worker holds after claiming them ahead (docs/configuration.md,
    /// "max_claimed_ahead"); zero: only due ones are claimed.
    pub max_claimed_ahead: usize,
    /// How long before their fire time the scheduler writes slots' executions
    /// (docs/configuration.md, "lookahead"), 2 s to 60 s.
    pub lookahead: sundial_core::Dur,
    /// `[http_targets] allow`: the hosts HTTP targets may reach; `None`: any host.
    pub http_allow: Option<Arc<HostAllowList>>,
    /// `[http_targets] max_connections_per_host`: most requests in flight to one host from
    /// this worker at once.
    pub http_max_connections_per_host: usize,
    /// `[[tokens]]`: the API's bearer tokens; `None`: requests need none, and the server
    /// listens only on loopback.
    pub tokens: Option<Arc<Tokens>>,
    /// `[maintenance]`: the periods of the maintenance services.
    pub maintenance: MaintenanceConfig,
    /// `[http]`: the listener's timeouts and connection cap.
    pub http: HttpLimits,
    /// `tls_cert` and `tls_key`: the API serves HTTPS with this certificate; `None`: plain
    /// HTTP.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// `[[alerts]]`, checked; empty: no alert dispatcher runs.
    pub alerts: Vec<AlertRule>,
    /// `maintenance.alerts_every`: the alert dispatcher's period (default 1 s).
    pub alerts_every: sundial_core::Dur,
    /// `public_url`: where users reach this server, for the UI links in alerts (default
    /// `http://LISTEN`, `https://` with TLS), without a trailing slash.
    pub public_url: String,
    /// `history_retention`: how long finished executions and runs are kept (default 30 days,
    /// [`sundial_store::maintenance::HISTORY_RETENTION_DEFAULT`]).
    pub history_retention: sundial_core::Dur,
    /// `audit_retention`: how long audit log entries are kept (default 400 days,
    /// [`sundial_store::maintenance::AUDIT_RETENTION_DEFAULT`]; at least a day).
    pub audit_retention: sundial_core::Dur,
    /// `[[signing_keys]]`, each key read from its file; empty: nothing is signed
    /// (docs/security.md, "Signed deliveries").
    pub signing: sundial_target::signing::Signer,
    /// `secrets_key_file`: the key that seals secret values (docs/security.md, "Secrets");
    /// read at start by [`crate::secrets::configured`], before the store opens; on SQLite
    /// without it, [`crate::secrets::beside_database`] reads or makes a key beside the
    /// database.
    pub secrets_key_file: Option<PathBuf>,
}

/// `history_retention` (docs/configuration.md): a duration of at least one minute; the
/// default when `None`.
///
/// # Errors
/// `history_retention: ...` for a value that is not a duration or is under a minute.
pub fn parse_retention(text: Option<&str>) -> anyhow::Result<sundial_core::Dur> {
    let Some(text) = text else {
        return Ok(sundial_store::maintenance::HISTORY_RETENTION_DEFAULT);
    };
    let retention = text
        .parse::<sundial_core::Dur>()
        .map_err(|e| anyhow::anyhow!("history_retention: {e}"))?;
    if retention < sundial_core::Dur::from_secs(60) {
        bail!(
            "history_retention: {retention} is under a minute; history that short would go while it is still being read"
        );
    }
    Ok(retention)
}

/// The default store URL.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://sundial.db";

impl ServerConfig {
    /// Resolves flags and environment over the file over defaults, and validates the result.
    ///
    /// # Errors
    /// An unreadable or malformed file, an unknown role, an unparsable listen address, or a
    /// connection of unknown type or with a URL of the wrong scheme — each named.
    pub fn resolve(args: ServerArgs) -> anyhow::Result<Self> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let roles = args
            .roles
            .or(file.roles)
            .unwrap_or_else(|| ROLES.map(String::from).to_vec());
        let mut roles: Vec<String> = roles
            .iter()
            .map(|r| r.trim().to_ascii_lowercase())
            .filter(|r| !r.is_empty())
            .collect();
        roles.sort();
        roles.dedup();
        if roles.is_empty() {
            bail!("--roles: name at least one of {}", ROLES.join(", "));
        }
        for role in &roles {
            if !ROLES.contains(&role.as_str()) {
                bail!("--roles: '{role}' is not one of {}", ROLES.join(", "));
            }
        }
        let listen_text = args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| "127.0.0.1:8080".into());
        let listen: SocketAddr = listen_text.parse().with_context(|| {
            format!("--listen (or SUNDIAL_LISTEN, or listen in the file): '{listen_text}' is not an address like 127.0.0.1:8080")
        })?;
        let mut tokens = Vec::with_capacity(file.tokens.len());
        for (i, t) in file.tokens.iter().enumerate() {
            let token = ApiToken::parse(&t.token_sha256, &t.role, &t.namespaces);
            let token = match &t.name {
                Some(name) => token.and_then(|token| token.named(name)),
                None => token,
            };
            tokens.push(
                token
                    .map_err(|(field, reason)| anyhow::anyhow!("tokens[{i}].{field}: {reason}"))?,
            );
        }
        let tokens = Tokens::new(tokens).map_err(|(i, j, field)| match field {
            "name" => anyhow::anyhow!(
                "tokens[{i}].name: the name of tokens[{j}] as well; give each token its own name"
            ),
            _ => anyhow::anyhow!(
                "tokens[{i}].token_sha256: the same token as tokens[{j}]; give each token one entry"
            ),
        })?;
        let tls = match (&file.tls_cert, &file.tls_key) {
            (None, None) => None,
            (Some(_), None) => bail!("tls_key: missing; give it with tls_cert, or neither"),
            (None, Some(_)) => bail!("tls_cert: missing; give it with tls_key, or neither"),
            (Some(cert), Some(key)) => Some(Arc::new(tls_config(cert, key)?)),
        };
        if !tokens.is_empty() && !listen.ip().is_loopback() && tls.is_none() && !file.insecure_http
        {
            bail!(
                "--listen (or SUNDIAL_LISTEN, or listen in the file): {listen} is not a loopback address and API tokens are configured, but tls_cert and tls_key are not: bearer tokens would cross the network in the clear. Give tls_cert and tls_key, or set insecure_http = true when a proxy in front terminates TLS (docs/configuration.md, tls_cert)"
            );
        }
        if tokens.is_empty() && !listen.ip().is_loopback() {
            bail!(
                "--listen (or SUNDIAL_LISTEN, or listen in the file): {listen} is not a loopback address; without API tokens configured the server only listens on loopback (docs/configuration.md, tokens)"
            );
        }
        for (name, c) in &file.connections {
            c.endpoint()
                .map_err(|e| anyhow::anyhow!("connections.{name}.{e}"))?;
        }
        // A section with nothing in it would look like a limit and be none.
        if matches!(&file.http_targets, Some(t) if t.allow.is_none() && t.max_connections_per_host.is_none())
        {
            bail!(
                "http_targets.allow: missing; list the hosts HTTP targets may reach, or set max_connections_per_host alone, or leave [http_targets] out"
            );
        }
        let HttpTargetsConfig {
            allow,
            max_connections_per_host,
        } = file.http_targets.unwrap_or_default();
        let http_max_connections_per_host = match max_connections_per_host {
            None => sundial_target::DEFAULT_MAX_CONNECTIONS_PER_HOST,
            Some(n @ 1..=100_000) => n,
            Some(n) => bail!("http_targets.max_connections_per_host: {n} is out of range 1-100000"),
        };
        let http_allow = match allow {
            None => None,
            Some(patterns) => Some(Arc::new(
                HostAllowList::parse(&patterns)
                    .map_err(|(i, reason)| anyhow::anyhow!("http_targets.allow[{i}]: {reason}"))?,
            )),
        };
        let mut rate_limits = BTreeMap::new();
        for (ns, settings) in &file.namespaces {
            sundial_core::names::check_name(ns)
                .map_err(|m| anyhow::anyhow!("namespaces.{ns}: the name {m}"))?;
            if let Some(rate) = settings.max_dispatch_per_second {
                if !(1.0..=1_000_000.0).contains(&rate) {
                    bail!(
                        "namespaces.{ns}.max_dispatch_per_second: {rate} is not a number in 1-1000000"
                    );
                }
                rate_limits.insert(ns.clone(), rate);
            }
        }
        let ttl_text = args
            .lease_ttl
            .or(file.lease_ttl)
            .unwrap_or_else(|| "10s".into());
        let lease_ttl: sundial_core::Dur = ttl_text
            .parse()
            .map_err(|e| anyhow::anyhow!("--lease-ttl: {e}"))?;
        if lease_ttl.as_millis() < 1000 {
            bail!("--lease-ttl: {lease_ttl} is shorter than the minimum of 1s");
        }
        let shutdown_grace = match args.shutdown_grace.or(file.shutdown_grace) {
            None => sundial_worker::DEFAULT_SHUTDOWN_GRACE,
            Some(text) => {
                let grace: sundial_core::Dur = text
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--shutdown-grace: {e}"))?;
                if grace > sundial_core::Dur::from_secs(600) {
                    bail!(
                        "--shutdown-grace: {grace} is longer than the maximum of 10m; a stop that long holds a rollout up"
                    );
                }
                grace
            }
        };
        let maintenance = file.maintenance.resolve()?;
        let http = file.http.resolve()?;
        if let Some(every) = maintenance.node_heartbeat_every
            && every >= lease_ttl
        {
            bail!(
                "maintenance.node_heartbeat_every: {every} is not shorter than the lease TTL \
                 ({lease_ttl}); a node's record would lapse between two heartbeats"
            );
        }
        let max_in_flight = whole_number(
            "--max-in-flight (or SUNDIAL_MAX_IN_FLIGHT, or max_in_flight in the file)",
            args.max_in_flight.as_deref(),
            file.max_in_flight.as_ref(),
            1024,
            1..=100_000,
        )?;
        let claim_ahead_text = duration_text(
            CLAIM_AHEAD_NAMES,
            args.claim_ahead,
            file.claim_ahead.as_ref(),
        )?;
        let claim_ahead: sundial_core::Dur = match claim_ahead_text {
            Some(text) => text
                .parse()
                .map_err(|e| anyhow::anyhow!("{CLAIM_AHEAD_NAMES}: {e}"))?,
            None => sundial_worker::DEFAULT_CLAIM_AHEAD,
        };
        if claim_ahead.as_millis() > 10_000 {
            bail!("{CLAIM_AHEAD_NAMES}: {claim_ahead} is longer than the maximum of 10s");
        }
        let max_claimed_ahead = whole_number(
            "--max-claimed-ahead (or SUNDIAL_MAX_CLAIMED_AHEAD, or max_claimed_ahead in the file)",
            args.max_claimed_ahead.as_deref(),
            file.max_claimed_ahead.as_ref(),
            sundial_worker::DEFAULT_MAX_CLAIMED_AHEAD,
            0..=1_000_000,
        )?;
        let lookahead = parse_lookahead(
            duration_text(LOOKAHEAD_NAMES, args.lookahead, file.lookahead.as_ref())?.as_deref(),
        )?;
        let alerts = resolve_alerts(&file.alerts, &file.connections)?;
        let alerts_every = match &file.maintenance.alerts_every {
            Some(t) => t
                .parse::<sundial_core::Dur>()
                .map_err(|e| anyhow::anyhow!("maintenance.alerts_every: {e}"))?,
            None => sundial_worker::ALERTS_EVERY_DEFAULT,
        };
        let public_url = match file.public_url {
            Some(u) => {
                let host = u
                    .strip_prefix("https://")
                    .or_else(|| u.strip_prefix("http://"))
                    .unwrap_or("");
                if host.is_empty() || u.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    bail!("public_url: '{u}' is not an http:// or https:// URL");
                }
                u.trim_end_matches('/').to_owned()
            }
            None => format!(
                "{}://{listen}",
                if tls.is_some() { "https" } else { "http" }
            ),
        };
        let history_retention = parse_retention(file.history_retention.as_deref())?;
        let audit_retention = match file.audit_retention.as_deref() {
            None => sundial_store::maintenance::AUDIT_RETENTION_DEFAULT,
            Some(text) => {
                let kept = text
                    .parse::<sundial_core::Dur>()
                    .map_err(|e| anyhow::anyhow!("audit_retention: {e}"))?;
                if kept < sundial_core::Dur::from_secs(86_400) {
                    bail!(
                        "audit_retention: {kept} is under a day; an audit log must outlast the incident it is read for"
                    );
                }
                kept
            }
        };
        let signing = crate::signing::resolve(&file.signing_keys)?;
        Ok(ServerConfig {
            secrets_key_file: file.secrets_key_file,
            signing,
            history_retention,
            audit_retention,
            alerts,
            alerts_every,
            public_url,
            roles,
            max_in_flight,
            claim_ahead,
            max_claimed_ahead,
            lookahead,
            database_url: args
                .database_url
                .or(file.database_url)
                .unwrap_or_else(|| DEFAULT_DATABASE_URL.into()),
            listen,
            node_id: args
                .node_id
                .or(file.node_id)
                .unwrap_or_else(default_node_id),
            connections: file.connections,
            lease_ttl,
            shutdown_grace,
            rate_limits,
            http_allow,
            http_max_connections_per_host,
            tokens: (!tokens.is_empty()).then(|| Arc::new(tokens)),
            maintenance,
            http,
            tls,
        })
    }

    /// The named connections, checked, for [`sundial_target::Targets::connect`].
    pub fn endpoints(&self) -> BTreeMap<String, Endpoint> {
        self.connections
            .iter()
            .filter_map(|(name, c)| Some((name.clone(), c.endpoint().ok()?)))
            .collect()
    }

    /// True when this process runs `role`.
    pub fn has(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

/// The `[[alerts]]` entries, checked (docs/configuration.md, "`[[alerts]]`").
///
/// # Errors
/// The first bad entry's field, named `alerts[i].FIELD` with the reason: a missing or badly
/// formed or repeated `name`; a missing or empty `on`, or a state outside
/// [`sundial_store::ALERT_STATES`]; missing or empty `namespaces`, or one that is neither a
/// namespace name nor `*`; a missing target, a container target, or any target field a job's
/// target would be refused for (an unknown connection among them).
fn resolve_alerts(
    entries: &[AlertFile],
    connections: &BTreeMap<String, ConnectionConfig>,
) -> anyhow::Result<Vec<AlertRule>> {
    let ctx = sundial_core::validate::Context {
        connections: connections
            .iter()
            .map(|(n, c)| (n.clone(), c.kind.clone()))
            .collect(),
        ..Default::default()
    };
    let states = sundial_store::ALERT_STATES.join(", ");
    let mut rules: Vec<AlertRule> = Vec::with_capacity(entries.len());
    for (i, a) in entries.iter().enumerate() {
        let Some(name) = &a.name else {
            bail!("alerts[{i}].name: missing; give each alert a name");
        };
        sundial_core::names::check_name(name)
            .map_err(|m| anyhow::anyhow!("alerts[{i}].name: the name {m}"))?;
        if let Some(j) = rules.iter().position(|r| r.name == *name) {
            bail!("alerts[{i}].name: '{name}' is also the name of alerts[{j}]; names must differ");
        }
        let on = match &a.on {
            None => bail!("alerts[{i}].on: missing; name the states to alert on ({states})"),
            Some(on) if on.is_empty() => {
                bail!("alerts[{i}].on: empty; name the states to alert on ({states})")
            }
            Some(on) => on,
        };
        for (j, state) in on.iter().enumerate() {
            if !sundial_store::ALERT_STATES.contains(&state.as_str()) {
                bail!("alerts[{i}].on[{j}]: '{state}' is not one of {states}");
            }
        }
        let namespaces = match &a.namespaces {
            None => {
                bail!("alerts[{i}].namespaces: missing; name namespaces, or [\"*\"] for every one")
            }
            Some(n) if n.is_empty() => {
                bail!("alerts[{i}].namespaces: empty; name namespaces, or [\"*\"] for every one")
            }
            Some(n) => n,
        };
        for (j, ns) in namespaces.iter().enumerate() {
            if ns != "*" {
                sundial_core::names::check_name(ns)
                    .map_err(|m| anyhow::anyhow!("alerts[{i}].namespaces[{j}]: the name {m}"))?;
            }
        }
        let Some(target) = &a.target else {
            bail!("alerts[{i}].target: missing; give an http, nats, amqp or redis target");
        };
        if target.get("type").and_then(|t| t.as_str()) == Some("container") {
            bail!(
                "alerts[{i}].target.type: a container cannot carry an alert; use http, nats, amqp or redis"
            );
        }
        let target = sundial_core::validate::target_from_json(target, &ctx).map_err(|errors| {
            let text: Vec<String> = errors
                .iter()
                .map(|e| format!("alerts[{i}].{}: {}", e.field, e.message))
                .collect();
            anyhow::anyhow!(text.join("; "))
        })?;
        rules.push(AlertRule {
            name: name.clone(),
            on: on.clone(),
            namespaces: namespaces.clone(),
            target,
        });
    }
    Ok(rules)
}

/// The HTTPS settings from a PEM certificate chain and a PEM private key (PKCS#8, PKCS#1 or
/// SEC1).
///
/// # Errors
/// `tls_cert: …` or `tls_key: …` for a file that cannot be read or holds nothing usable, and
/// for a key that does not match the certificate.
fn tls_config(cert: &Path, key: &Path) -> anyhow::Result<tokio_rustls::rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect)
        .map_err(|e| anyhow::anyhow!("tls_cert: {}: {e}", cert.display()))?;
    if chain.is_empty() {
        bail!("tls_cert: {} holds no PEM certificate", cert.display());
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("tls_key: {}: {e}", key.display()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow::anyhow!("tls_cert: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| anyhow::anyhow!("tls_key: {}: {e}", key.display()))
}

/// A whole-number setting: the flag's (or environment variable's) text, else the file's TOML
/// value, else `default`.
///
/// # Errors
/// One line naming the setting (`names`): text that is not all decimal digits, a file value
/// that is not an integer, or a number outside `range`.
fn whole_number(
    names: &str,
    text: Option<&str>,
    file: Option<&toml::Value>,
    default: usize,
    range: std::ops::RangeInclusive<usize>,
) -> anyhow::Result<usize> {
    let (lo, hi) = (range.start(), range.end());
    let n = match (text, file) {
        (Some(t), _) if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) => {
            bail!("{names}: '{t}' is not a whole number {lo}-{hi}")
        }
        // All digits: only too many of them fails to parse.
        (Some(t), _) => t.parse::<usize>().ok(),
        (None, Some(toml::Value::Integer(i))) => usize::try_from(*i).ok(),
        (None, Some(other)) => bail!(
            "{names}: {} is not a whole number {lo}-{hi}",
            toml_shown(other)
        ),
        (None, None) => Some(default),
    };
    match n {
        Some(n) if range.contains(&n) => Ok(n),
        Some(n) => bail!("{names}: {n} is out of range {lo}-{hi}"),
        None => bail!(
            "{names}: {} is out of range {lo}-{hi}",
            text.map_or_else(|| file.map(toml_shown).unwrap_or_default(), str::to_owned)
        ),
    }
}

/// How the lookahead setting is named in its messages.
const LOOKAHEAD_NAMES: &str = "--lookahead (or SUNDIAL_LOOKAHEAD, or lookahead in the file)";

/// How the claim_ahead setting is named in its messages.
const CLAIM_AHEAD_NAMES: &str =
    "--claim-ahead (or SUNDIAL_CLAIM_AHEAD, or claim_ahead in the file)";

/// A duration setting's text: the flag's (or environment variable's), else the file's, which
/// must be a TOML string.
///
/// # Errors
/// One line naming the setting (`names`) for a file value that is not a string.
fn duration_text(
    names: &str,
    text: Option<String>,
    file: Option<&toml::Value>,
) -> anyhow::Result<Option<String>> {
    match (text, file) {
        (Some(t), _) => Ok(Some(t)),
        (None, Some(toml::Value::String(s))) => Ok(Some(s.clone())),
        (None, Some(other)) => bail!(
            "{names}: {} is not a duration; write it as a string such as \"10s\"",
            toml_shown(other)
        ),
        (None, None) => Ok(None),
    }
}

/// The scheduler's lookahead (docs/configuration.md, "lookahead"): `text` parsed as a
/// duration, else [`sundial_scheduler::DEFAULT_LOOKAHEAD`] (5 s).
///
/// # Errors
/// One line naming `--lookahead`, its variable and its file key: text that is not a duration,
/// or one outside 2 s to 60 s (shorter than two of the scheduler's passes, a second apart at
/// most, would let a slot be written after its fire time).
fn parse_lookahead(text: Option<&str>) -> anyhow::Result<sundial_core::Dur> {
    let Some(text) = text else {
        return Ok(sundial_scheduler::DEFAULT_LOOKAHEAD);
    };
    let lookahead: sundial_core::Dur = text
        .parse()
        .map_err(|e| anyhow::anyhow!("{LOOKAHEAD_NAMES}: {e}"))?;
    if !(2_000..=60_000).contains(&lookahead.as_millis()) {
        bail!("{LOOKAHEAD_NAMES}: {lookahead} is outside 2s-60s");
    }
    Ok(lookahead)
}

/// A TOML value as a message shows it: a number or a quoted string as written, else its type.
fn toml_shown(v: &toml::Value) -> String {
    match v {
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::String(s) => format!("{s:?}"),
        other => format!("a value of type {}", other.type_str()),
    }
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--config: cannot read {}", path.display()))?;
    // The parser's message quotes the line it stopped at: a key written inline (a typo for
    // `secret_file`) is shown as its prefix alone.
    toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "--config: {} is not a valid configuration: {}",
            path.display(),
            without_keys(&e.to_string())
        )
    })
}

/// `text` with the base64 after each `whsec_` or `whsk_` (a secret key) replaced by `***`.
fn without_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = ["whsec_", "whsk_"]
        .iter()
        .filter_map(|p| rest.find(p).map(|i| (i, p.len())))
        .min()
    {
        let (i, len) = at;
        out.push_str(&rest[..i + len]);
        out.push_str("***");
        rest = rest[i + len..].trim_start_matches(|c: char| {
            c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=')
        });
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[test]
fn a_key_written_inline_is_not_quoted_back() {
    assert_eq!(
        without_keys("3 | secret = \"whsec_AbC+/=\" and whsk_xyz"),
        "3 | secret = \"whsec_***\" and whsk_***"
    );
}

/// `<host name>-<pid>`.
fn default_node_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into());
    format!("{host}-{}", std::process::id())
}
