//! The container target (docs/failure-classes.md, "container"): one container per attempt
//! through the Docker Engine API (Docker, or Podman's compatible service), run to its end and
//! removed.
//!
//! ```text
//!   create sundial-<execution id>-<attempt> ─▶ start ─▶ wait ─▶ logs (last 4 KiB) ─▶ remove
//!      │ 404: image not found → permanent           exit 0 → success
//!      │ 400: bad definition   → permanent          exit in permanent_exit_codes → permanent
//!      └ other error          → transient           other exit code → transient
//! ```
//! The container's environment is the job's `env` plus `SUNDIAL_EXECUTION_ID`,
//! `SUNDIAL_ATTEMPT` and `SUNDIAL_SCHEDULED_AT` (RFC 3339); its labels name the execution
//! and attempt. Images are never pulled: the engine must hold the image.
//!
//! # Cancel safety
//! Dropping a dispatch future (the attempt's timeout, a cancelled execution) removes the
//! container with `force` in a background task, so a timed-out container does not go on
//! running.

use std::collections::HashMap;

use async_trait::async_trait;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use bollard::{API_DEFAULT_VERSION, Docker, errors::Error as DockerError, models};
use futures_util::StreamExt;
use sundial_core::job::{ContainerTarget as ContainerSpec, TargetSpec};

use crate::{BoxError, Delivery, Error, Outcome, Target, error_chain};

/// How many bytes of the container's output (stdout and stderr, interleaved) are kept: the
/// last 4 KiB.
pub const LOG_TAIL_BYTES: usize = 4096;

/// Timeout of one Engine API request, waiting for the container included: a day, because
/// the attempt's own timeout (the worker's) is what bounds a run.
const REQUEST_TIMEOUT_SECS: u64 = 86_400;

/// The container target: one shared Engine API client.
#[derive(Debug, Clone)]
pub struct ContainerTarget {
    docker: Docker,
}

impl ContainerTarget {
    /// Connects to the engine at `url` — `unix:///path/to.sock`, `http://host:port` or
    /// `tcp://host:port` — pings it and negotiates the API version.
    ///
    /// # Errors
    /// A socket that does not exist, an engine that does not answer the ping.
    pub async fn connect(url: &str) -> Result<Self, BoxError> {
        let docker = client(url)?;
        let docker = docker.negotiate_version().await?;
        docker.ping().await?;
        Ok(ContainerTarget { docker })
    }

    /// A target that has not checked its engine (for unit tests of the dispatch path).
    #[cfg(test)]
    pub(crate) fn for_tests(url: &str) -> Self {
        let docker = Docker::connect_with_http("http://127.0.0.1:1", 5, API_DEFAULT_VERSION)
            .unwrap_or_else(|_| panic!("client for {url}"));
        ContainerTarget { docker }
    }
}

fn client(url: &str) -> Result<Docker, DockerError> {
    if let Some(path) = url.strip_prefix("unix://") {
        Docker::connect_with_unix(path, REQUEST_TIMEOUT_SECS, API_DEFAULT_VERSION)
    } else {
        let http = match url.strip_prefix("tcp://") {
            Some(rest) => format!("http://{rest}"),
            None => url.to_owned(),
        };
        Docker::connect_with_http(&http, REQUEST_TIMEOUT_SECS, API_DEFAULT_VERSION)
    }
}

/// How a container's exit code counts (the module table in `lib.rs`).
pub(crate) fn classify_exit(code: i64, permanent_exit_codes: &[i64]) -> ExitClass {
    if code == 0 {
        ExitClass::Success
    } else if permanent_exit_codes.contains(&code) {
        ExitClass::Permanent
    } else {
        ExitClass::Transient
    }
}

/// The class of an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitClass {
    Success,
    Transient,
    Permanent,
}

/// How an Engine API error from creating the container counts: 404 (no such image) and
/// 400 (a definition the engine refuses) are permanent, the rest transient.
fn create_error(image: &str, e: DockerError) -> Error {
    match e {
        DockerError::DockerResponseServerError {
            status_code: 404,
            message,
        } => Error::Permanent {
            status_code: None,
            message: format!("image not found: {image} ({message}); images are not pulled"),
        },
        DockerError::DockerResponseServerError {
            status_code: 400,
            message,
        } => Error::Permanent {
            status_code: None,
            message: format!("the engine refused the container: {message}"),
        },
        other => Error::transient(format!("create container: {}", error_chain(&other))),
    }
}

/// Removes the container when dropped, unless disarmed: in a background task, with `force`.
struct Cleanup {
    docker: Docker,
    name: String,
    armed: bool,
}

impl Cleanup {
    async fn remove_now(mut self) {
        self.armed = false;
        remove(&self.docker, &self.name).await;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let docker = self.docker.clone();
            let name = std::mem::take(&mut self.name);
            handle.spawn(async move { remove(&docker, &name).await });
        }
    }
}

async fn remove(docker: &Docker, name: &str) {
    let options = RemoveContainerOptionsBuilder::new().force(true).build();
    if let Err(e) = docker.remove_container(name, Some(options)).await {
        tracing::warn!(container = name, error = %e, "cannot remove container");
    }
}

/// The last [`LOG_TAIL_BYTES`] of the container's output, as text (invalid UTF-8 replaced).
async fn log_tail(docker: &Docker, name: &str) -> String {
    let options = LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .follow(false)
        .tail("all")
        .build();
    let mut stream = docker.logs(name, Some(options));
    let mut tail: Vec<u8> = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(output) => {
                tail.extend_from_slice(&output.into_bytes());
                if tail.len() > 2 * LOG_TAIL_BYTES {
                    tail.drain(..tail.len() - LOG_TAIL_BYTES);
                }
            }
            Err(e) => {
                tracing::warn!(container = name, error = %e, "cannot read container logs");
                break;
            }
        }
    }
    keep_last(&tail, LOG_TAIL_BYTES)
}

/// The last `max` bytes of `bytes` as text, starting at a character boundary.
fn keep_last(bytes: &[u8], max: usize) -> String {
    let cut = &bytes[bytes.len().saturating_sub(max)..];
    let text = String::from_utf8_lossy(cut);
    // A multi-byte character split by the cut shows as U+FFFD at the start: drop it.
    text.trim_start_matches('\u{FFFD}').to_owned()
}

fn body(spec: &ContainerSpec, d: &Delivery<'_>) -> models::ContainerCreateBody {
    let mut env: Vec<String> = spec
        .env
        .iter()
        .filter(|(k, _)| !k.starts_with("SUNDIAL_"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.push(format!("SUNDIAL_EXECUTION_ID={}", d.execution_id));
    env.push(format!("SUNDIAL_ATTEMPT={}", d.attempt));
    env.push(format!("SUNDIAL_SCHEDULED_AT={}", d.scheduled_at));
    let labels = HashMap::from([
        ("sundial.execution-id".to_owned(), d.execution_id.to_owned()),
        ("sundial.attempt".to_owned(), d.attempt.to_string()),
    ]);
    models::ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: (!spec.command.is_empty()).then(|| spec.command.clone()),
        env: Some(env),
        labels: Some(labels),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        ..Default::default()
    }
}

/// A name the engine accepts (`[a-zA-Z0-9][a-zA-Z0-9_.-]+`), unique per attempt.
fn container_name(execution_id: &str, attempt: u32) -> String {
    let id: String = execution_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("sundial-{id}-{attempt}")
}

#[async_trait]
impl Target for ContainerTarget {
    async fn dispatch(&self, d: &Delivery<'_>) -> Result<Outcome, Error> {
        let TargetSpec::Container(spec) = d.target else {
            return Err(Error::permanent(format!(
                "not a container target: {}",
                d.target.kind()
            )));
        };
        let name = container_name(d.execution_id, d.attempt);
        let create = |body| {
            let options = CreateContainerOptionsBuilder::new().name(&name).build();
            self.docker.create_container(Some(options), body)
        };
        match create(body(spec, d)).await {
            Ok(_) => {}
            // A container of this attempt left over by a crashed worker: replace it.
            Err(DockerError::DockerResponseServerError {
                status_code: 409, ..
            }) => {
                remove(&self.docker, &name).await;
                create(body(spec, d))
                    .await
                    .map_err(|e| create_error(&spec.image, e))?;
            }
            Err(e) => return Err(create_error(&spec.image, e)),
        }
        let cleanup = Cleanup {
            docker: self.docker.clone(),
            name: name.clone(),
            armed: true,
        };
        if let Err(e) = self.docker.start_container(&name, None).await {
            let message = format!("start container {name}: {}", error_chain(&e));
            cleanup.remove_now().await;
            return Err(Error::transient(message));
        }
        let exit = match self.docker.wait_container(&name, None).next().await {
            Some(Ok(response)) => Ok(response.status_code),
            Some(Err(DockerError::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(e)) => Err(format!("wait for container {name}: {}", error_chain(&e))),
            None => Err(format!("wait for container {name}: no answer")),
        };
        let logs = log_tail(&self.docker, &name).await;
        cleanup.remove_now().await;
        let code = exit.map_err(Error::transient)?;
        let with_logs = |head: String| {
            if logs.is_empty() {
                head
            } else {
                format!("{head}; output:\n{logs}")
            }
        };
        match classify_exit(code, &spec.permanent_exit_codes) {
            ExitClass::Success => Ok(Outcome {
                output: None,
                status_code: Some(code),
                detail: Some(logs),
            }),
            ExitClass::Permanent => Err(Error::Permanent {
                status_code: Some(code),
                message: with_logs(format!(
                    "container exited with code {code}, listed in permanent_exit_codes"
                )),
            }),
            ExitClass::Transient => Err(Error::Retryable {
                after: None,
                status_code: Some(code),
                message: with_logs(format!("container exited with code {code}")),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_table() {
        assert_eq!(classify_exit(0, &[3]), ExitClass::Success);
        assert_eq!(classify_exit(3, &[3]), ExitClass::Permanent);
        assert_eq!(classify_exit(1, &[3]), ExitClass::Transient);
        assert_eq!(classify_exit(137, &[]), ExitClass::Transient);
    }

    #[test]
    fn the_log_tail_keeps_the_last_bytes_on_a_character_boundary() {
        let text = "é".repeat(3000); // 6000 bytes
        let tail = keep_last(text.as_bytes(), LOG_TAIL_BYTES);
        assert!(tail.len() <= LOG_TAIL_BYTES);
        assert!(tail.chars().all(|c| c == 'é'));
        assert_eq!(keep_last(b"short", LOG_TAIL_BYTES), "short");
    }

    #[test]
    fn container_names_are_valid_and_unique_per_attempt() {
        assert_eq!(container_name("0193a5c4-ab", 2), "sundial-0193a5c4-ab-2");
        assert_eq!(container_name("a/b c", 1), "sundial-a_b_c-1");
    }

    #[test]
    fn missing_images_and_refused_definitions_fail_for_good() {
        let e = |status_code| DockerError::DockerResponseServerError {
            status_code,
            message: "x".into(),
        };
        assert!(!create_error("img", e(404)).is_retryable());
        assert!(!create_error("img", e(400)).is_retryable());
        assert!(create_error("img", e(500)).is_retryable());
    }
}
