//! The OpenAPI 3.1 document of the `/v1` API (README.md, "The API"; `GET /v1/openapi.json`), generated
//! from the code: every `/v1` route is registered through [`utoipa_axum`]'s `routes!` from a
//! handler annotated with `#[utoipa::path]`, so the router and the document are built from
//! the same list and a route cannot be served without its path in the document.
//!
//! Request bodies are validated by hand so that a rejected request names every bad field
//! (`sundial_core::validate`); the body types here are what those validators accept, for the
//! document. Responses are the typed resources of [`crate::resource`] and
//! [`crate::workflows`], and [`Problem`] for every error.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use sundial_core::job::JobSpec;
use sundial_core::workflow::WorkflowSpec;
use utoipa::openapi::{ContentBuilder, RefOr, ResponseBuilder, ResponsesBuilder};
use utoipa::{IntoResponses, OpenApi, ToSchema};

use crate::error::Problem;

/// The document's fixed part: title, version, tags; the paths and the schemas they use are
/// added by the router ([`crate::router`]).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Sundial",
        description = "A distributed job scheduler: jobs fired on time and exactly once per slot, workflows (DAGs of tasks), their executions and runs. Errors are RFC 9457 problem documents naming every bad field.",
        license(name = "Apache-2.0")
    ),
    tags(
        (name = "jobs", description = "Jobs and their schedules"),
        (name = "executions", description = "Executions, attempts and dead letters"),
        (name = "workflows", description = "Workflows and their runs"),
        (name = "calendars", description = "Holiday calendars schedules exclude days by"),
        (name = "audit", description = "Who changed what: the namespace's audit log and its hash chain"),
        (name = "cluster", description = "Namespaces, nodes, shards, the cron preview")
    ),
    components(schemas(Problem))
)]
pub struct ApiDoc;

/// A job as written: `PUT` takes it without `name` (the path names it), `POST` with. Read-only
/// fields sent back from a `GET` are ignored.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobInput {
    /// The definition; only `schedule` and `target` are required.
    #[serde(flatten)]
    pub spec: JobSpec,
}

/// `POST /v1/namespaces/{ns}/jobs:apply`: up to 1,000 jobs, written all or none.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobsApply {
    /// The jobs, each with its `name`.
    pub jobs: Vec<JobSpec>,
}

/// `POST /v1/namespaces/{ns}/workflows:apply`: up to 100 workflows, written all or none.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkflowsApply {
    /// The workflows, each with its `name`.
    pub workflows: Vec<WorkflowSpec>,
}

/// A JSON merge patch (RFC 7396) of a job or workflow: members replace, `null` removes.
#[derive(Debug, Serialize, ToSchema)]
pub struct MergePatch(pub BTreeMap<String, Value>);

/// `POST .../workflows/{name}/trigger`: a manual run; `params` are merged over the
/// workflow's own.
#[derive(Debug, Serialize, ToSchema)]
pub struct TriggerBody {
    /// Run parameters (a JSON object).
    pub params: Option<BTreeMap<String, Value>>,
}

/// `POST .../runs/{run_id}/retry`: without `tasks` every failed task and its downstream is
/// run again; with it, the tasks named and their downstream.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunRetryBody {
    /// Task names.
    pub tasks: Option<Vec<String>>,
}

/// `POST /v1/cron/next`: the next fire times of a cron expression.
#[derive(Debug, Serialize, ToSchema)]
pub struct CronNextRequest {
    /// The expression (docs/cron.md).
    pub cron: String,
    /// IANA zone; `UTC` by default.
    pub timezone: Option<String>,
    /// From this instant (UTC, RFC 3339); now by default.
    pub from: Option<jiff::Timestamp>,
    /// How many, 1 to 1000; 5 by default.
    pub count: Option<u32>,
    /// A DST policy (docs/cron.md, "DST policy"); the dialect's rule by default.
    pub dst: Option<sundial_core::job::DstSpec>,
    /// The namespace whose calendars `exclude_calendars` names.
    pub namespace: Option<String>,
    /// Calendars of `namespace` whose excluded days yield no fire time (docs/time.md).
    pub exclude_calendars: Option<Vec<String>>,
}

/// The answer to [`CronNextRequest`].
#[derive(Debug, Serialize, ToSchema)]
pub struct CronNextResponse {
    /// Fire times, RFC 3339 with the zone's UTC offset at each (e.g. `2026-03-29T03:00:00+02:00`).
    pub fire_times: Vec<jiff::Timestamp>,
}

/// One namespace of `GET /v1/namespaces`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Namespace {
    /// Its name.
    pub name: String,
}

/// `GET /v1/cluster`: this node, the nodes seen in the last minute and the queue.
#[derive(Debug, Serialize, ToSchema)]
pub struct Cluster {
    /// The store's time (UTC).
    pub now: jiff::Timestamp,
    /// The node answering: `{"id", "roles"}`.
    pub this_node: Value,
    /// The nodes, with their roles, heartbeats and shards held.
    pub nodes: Vec<sundial_store::NodeStatus>,
    /// `{"queued", "scheduled", "running"}`: executions by state.
    pub queue: Value,
}

/// The error answers every route may give, each a [`Problem`] (`application/problem+json`):
/// 400 a malformed request or query, 401 no known token, 403 a token without the right,
/// 404 not found, 409 a conflict with the current state, 412 a stale `If-Match`, 413 a body
/// over the limit, 415 a body that is not JSON, 422 invalid fields, 500 a defect, 503 the
/// store unavailable or busy.
pub struct Problems;

impl IntoResponses for Problems {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
        let problem = || {
            ContentBuilder::new()
                .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                    "Problem",
                ))))
                .build()
        };
        let mut responses = ResponsesBuilder::new();
        for (status, what) in [
            (
                "400",
                "A malformed request: a bad query parameter, path segment or JSON body",
            ),
            (
                "401",
                "No bearer token this server knows (with tokens configured)",
            ),
            ("403", "The token may not do this, or not in this namespace"),
            ("404", "Not found"),
            ("405", "The route does not take this method"),
            ("409", "Conflicts with the current state"),
            (
                "412",
                "If-Match names a version that is not the current one",
            ),
            ("413", "The body is over the size limit"),
            ("415", "The body is not application/json"),
            ("422", "Fields are invalid; `errors` names each"),
            ("500", "A defect of Sundial"),
            (
                "503",
                "The store is unavailable or busy; nothing was written",
            ),
        ] {
            responses = responses.response(
                status,
                ResponseBuilder::new()
                    .description(what)
                    .content("application/problem+json", problem()),
            );
        }
        responses.build().into()
    }
}
