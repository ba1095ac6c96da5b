//! The HTTP client of a Sundial server that every client command shares: the flags that say
//! which API, as whom and in which namespace ([`ClientOpts`]), the output [`Format`], the
//! [`Api`] client with its path checks, and [`InputError`] for exit status 2
//! (docs/configuration.md, "Client commands").

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use serde_json::Value;

use crate::output::problem_text;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// The API's JSON.
    Json,
}

/// Flags every client command takes: which API, as whom, in which namespace. Each command
/// family has its own `-o` flag (`job` and `exec` take [`FormatArg`]); `output` holds the
/// format a `job` or `exec` command runs with.
#[derive(Debug, Clone, Args)]
pub struct ClientOpts {
    /// API base URL
    #[arg(
        long,
        global = true,
        env = "SUNDIAL_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    pub server: String,
    /// Bearer token
    #[arg(long, global = true, env = "SUNDIAL_TOKEN")]
    pub token: Option<String>,
    /// A PEM file of CA certificates to trust for an https:// server, besides the system's
    #[arg(long, global = true, env = "SUNDIAL_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// Namespace
    #[arg(
        short = 'n',
        long,
        global = true,
        env = "SUNDIAL_NAMESPACE",
        default_value = "default"
    )]
    pub namespace: String,
    /// Output format, set from the command's own `-o` flag
    #[arg(skip = Format::Table)]
    pub output: Format,
    /// Whether `namespace` was given (`-n`, `--namespace` or `SUNDIAL_NAMESPACE`) rather than
    /// defaulted, set by `main` from the parsed command line: `apply` refuses a file whose
    /// items name another namespace than the one given.
    #[arg(skip)]
    pub namespace_given: bool,
}

/// `-o table|json`, which the `job` and `exec` commands take.
#[derive(Debug, Clone, Copy, Args)]
pub struct FormatArg {
    /// Output format
    #[arg(short = 'o', long, global = true, value_enum, default_value = "table")]
    pub output: Format,
}

impl FormatArg {
    /// `opts` set to output in this format.
    pub(crate) fn apply_to(self, opts: ClientOpts) -> ClientOpts {
        ClientOpts {
            output: self.output,
            ..opts
        }
    }
}

/// An error that is the command line's or the input file's fault, not the server's: `main`
/// exits with status 2 for it, as for bad usage (main.rs).
#[derive(Debug)]
pub struct InputError(pub String);

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

/// An [`InputError`] with this message.
pub fn input_error(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(InputError(message.into()))
}

/// Refuses a namespace that is not a name, and a name or id (of a job, execution, workflow or
/// run) that would change the request's path (`..`, `/`, `%`): URL parsing resolves
/// `a/../../b` to another namespace's route, so a name taken from a script's input could act
/// elsewhere.
fn check_path(namespace: &str, path: &str) -> anyhow::Result<()> {
    sundial_core::names::check_name(namespace)
        .map_err(|m| anyhow::anyhow!("-n/--namespace: '{namespace}': the name {m}"))?;
    let route = path.split('?').next().unwrap_or_default();
    for segment in route.split('/').skip(1) {
        let plain = segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
        if !plain || segment.is_empty() || segment.chars().all(|c| c == '.') {
            bail!("'{segment}' is not a name or an id");
        }
    }
    Ok(())
}

/// A thin API client.
pub struct Api {
    /// The HTTP client, or why it could not be made (a `--ca-cert` file that cannot be read),
    /// reported by the first request.
    http: Result<reqwest::Client, String>,
    pub(crate) opts: ClientOpts,
}

impl Api {
    /// A client for the server in `opts`, trusting `opts.ca_cert`'s certificates too.
    pub fn new(opts: ClientOpts) -> Self {
        Api {
            http: http_client(opts.ca_cert.as_deref()),
            opts,
        }
    }

    fn url(&self, path: &str) -> String {
        format!(
            "{}/v1/namespaces/{}{path}",
            self.opts.server.trim_end_matches('/'),
            self.opts.namespace
        )
    }

    /// The same client in namespace `ns`.
    pub fn in_namespace(&self, ns: &str) -> Api {
        Api {
            http: self.http.clone(),
            opts: ClientOpts {
                namespace: ns.to_owned(),
                ..self.opts.clone()
            },
        }
    }

    /// The namespaces that hold a job or a workflow and that the token may see
    /// (`GET /v1/namespaces`), sorted.
    ///
    /// # Errors
    /// Unreachable server or an error status.
    pub async fn namespaces(&self) -> anyhow::Result<Vec<String>> {
        let http = self.http.as_ref().map_err(|e| input_error(e.clone()))?;
        let url = format!("{}/v1/namespaces", self.opts.server.trim_end_matches('/'));
        let mut req = http.get(&url);
        if let Some(token) = &self.opts.token {
            req = req.bearer_auth(token.trim());
        }
        let resp = req.send().await.with_context(|| {
            format!(
                "cannot reach the Sundial API at {} (is `sundial server` running?)",
                self.opts.server
            )
        })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.context("reading the response")?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status >= 400 {
            bail!("{}", problem_text(&value));
        }
        Ok(value["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| i["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The listing `path` (e.g. `/jobs?limit=1000`) in the namespace given, or with `all` in
    /// every namespace [`Api::namespaces`] names, as one `{"items": [...]}` (each item names its
    /// namespace).
    ///
    /// # Errors
    /// As [`Api::call`].
    pub async fn list_across(&self, path: &str, all: bool) -> anyhow::Result<Value> {
        if !all {
            return self.call(reqwest::Method::GET, path, None).await;
        }
        let mut items = Vec::new();
        for ns in self.namespaces().await? {
            let v = self
                .in_namespace(&ns)
                .call(reqwest::Method::GET, path, None)
                .await?;
            items.extend(v["items"].as_array().cloned().unwrap_or_default());
        }
        Ok(serde_json::json!({"items": items, "next_page_token": null}))
    }

    /// After an empty listing of `what` (`jobs`, `workflows`) in the namespace given, says so
    /// on stderr and names the namespaces that do hold something, so a newcomer finds them.
    pub async fn hint_other_namespaces(&self, what: &str) {
        let ns = &self.opts.namespace;
        let others: Vec<String> = self
            .namespaces()
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n != ns)
            .collect();
        if others.is_empty() {
            eprintln!("no {what} in namespace '{ns}'");
        } else {
            eprintln!(
                "no {what} in namespace '{ns}'; namespaces with jobs or workflows: {} (give one with -n, or list all with -A)",
                others.join(", ")
            );
        }
    }

    /// Sends a request to `path` under the namespace; returns the status and the JSON body.
    ///
    /// # Errors
    /// When the server cannot be reached or answers with something that is not JSON.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value)> {
        check_path(&self.opts.namespace, path)?;
        let http = self.http.as_ref().map_err(|e| input_error(e.clone()))?;
        let url = self.url(path);
        let mut req = http.request(method, &url);
        if let Some(token) = &self.opts.token {
            // A token read from a file or a variable often ends in a newline.
            req = req.bearer_auth(token.trim());
        }
        if let Some(body) = body {
            req = req
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let resp = req.send().await.with_context(|| {
            format!(
                "cannot reach the Sundial API at {} (is `sundial server` running?)",
                self.opts.server
            )
        })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.context("reading the response")?;
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok((status, value))
    }

    /// Like [`Api::send`], but a 4xx/5xx answer becomes an error with the problem's text: a
    /// 404 names the namespace searched, and a request refused as invalid (400, 413, 422) is an
    /// [`InputError`] (exit status 2).
    ///
    /// # Errors
    /// Unreachable server or an error status.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let (status, value) = self.send(method, path, body).await?;
        if status == 404 {
            // Say where it was looked for, unless the server's words already do.
            let text = problem_text(&value);
            let ns = &self.opts.namespace;
            if text.contains(&format!("{ns}/")) {
                bail!("{text} (give another namespace with -n)");
            }
            bail!("{text} (searched namespace '{ns}'; give another with -n)");
        }
        if matches!(status, 400 | 413 | 422) {
            return Err(input_error(problem_text(&value)));
        }
        if status >= 400 {
            bail!("{}", problem_text(&value));
        }
        Ok(value)
    }
}

/// An HTTP client that also trusts the PEM certificates in `ca_cert`.
///
/// # Errors
/// `--ca-cert: …` when the file cannot be read or holds no certificate.
fn http_client(ca_cert: Option<&Path>) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder();
    if let Some(path) = ca_cert {
        let pem = std::fs::read(path)
            .map_err(|e| format!("--ca-cert: cannot read {}: {e}", path.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            format!(
                "--ca-cert: {} is not a PEM certificate file: {e}",
                path.display()
            )
        })?;
        if certs.is_empty() {
            return Err(format!(
                "--ca-cert: {} holds no certificate",
                path.display()
            ));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))
}

/// Pauses (`paused`) or resumes the `kind` (`job` or `workflow`) `name` through
/// `POST /<kind>s/{name}/pause|resume`, printing its state (and, resumed, its next fire time).
///
/// # Errors
/// The API's, as [`Api::call`] reports them.
pub async fn set_paused(
    api: &Api,
    format: Format,
    kind: &str,
    name: &str,
    paused: bool,
) -> anyhow::Result<()> {
    let verb = if paused { "pause" } else { "resume" };
    let v = api
        .call(
            reqwest::Method::POST,
            &format!("/{kind}s/{name}/{verb}"),
            None,
        )
        .await?;
    print(format, &v, |v| {
        let state = v["state"].as_str().unwrap_or("?");
        if paused {
            outln!("{kind} {name} {state}");
        } else {
            outln!(
                "{kind} {name} {state}; next fire at {}",
                v["next_fire_at"].as_str().unwrap_or("-")
            );
        }
    });
    Ok(())
}

/// Prints `value` as the API's JSON, or as `table` prints it for people.
pub fn print(format: Format, value: &Value, table: impl FnOnce(&Value)) {
    match format {
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        ),
        Format::Table => table(value),
    }
}
