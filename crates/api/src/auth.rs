//! Bearer-token authorization of the API (README.md "The API", `Authorization: Bearer <token>`, RFC 6750).
//!
//! Tokens come from the server's configuration (`[[tokens]]`, docs/configuration.md), each stored as the
//! SHA-256 of the token, with a role and the namespaces it may touch.
//!
//! Invariants:
//! - With tokens configured, a request to `/v1/…` runs only when it carries a configured
//!   token; otherwise it is answered 401 with `WWW-Authenticate: Bearer` and nothing runs.
//!   `/healthz`, `/readyz` and `/metrics` answer without a token (probes and scrapers), and
//!   so does `/v1/openapi.json`.
//! - A token acts only inside its namespaces: a request under `/v1/namespaces/{ns}/` for
//!   another namespace is answered 403 and nothing runs. Routes outside a namespace
//!   (`/v1/cluster`, `/v1/cron/next`) only read, and any token may call them.
//! - `viewer` tokens read (`GET`, `HEAD`, the cron preview and `jobs:plan`, which writes
//!   nothing); `editor` and `admin` tokens
//!   also write. A write with a viewer token is answered 403 and nothing runs.
//! - Presented tokens are compared by their SHA-256 digest, in constant time. A request with
//!   more than one `Authorization` header is refused (400), so no two grants combine.
//! - Two entries with one digest are refused ([`Tokens::new`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Reads only.
    Viewer,
    /// Reads and writes jobs and executions.
    Editor,
    /// Everything an editor may; the role routes for the whole cluster will ask for.
    Admin,
}

impl Role {
    /// `admin`, `editor` or `viewer`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Editor => "editor",
            Role::Viewer => "viewer",
        }
    }

    /// `admin`, `editor` or `viewer`.
    ///
    /// # Errors
    /// A message naming the three roles for anything else.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "admin" => Ok(Role::Admin),
            "editor" => Ok(Role::Editor),
            "viewer" => Ok(Role::Viewer),
            other => Err(format!("'{other}' is not one of admin, editor, viewer")),
        }
    }
}

/// The namespaces a token may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// `["*"]`: every namespace.
    All,
    /// These namespaces.
    Only(BTreeSet<String>),
}

impl Namespaces {
    /// True when `ns` is one of them.
    pub fn allows(&self, ns: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Only(names) => names.contains(ns),
        }
    }
}

/// One configured token.
#[derive(Debug, Clone)]
pub struct ApiToken {
    sha256: [u8; 32],
    name: String,
    role: Role,
    namespaces: Namespaces,
}

/// Why a token's configuration is refused: the field (`token_sha256`, `role`, `namespaces`)
/// and the reason.
pub type TokenError = (&'static str, String);

impl ApiToken {
    /// A token from its configuration: `token_sha256` as 64 hexadecimal digits (the SHA-256
    /// of the token, e.g. `printf %s "$TOKEN" | sha256sum`), `role` as in [`Role::parse`],
    /// `namespaces` as namespace names or `["*"]`.
    ///
    /// # Errors
    /// The first field that is wrong, with why.
    pub fn parse(
        token_sha256: &str,
        role: &str,
        namespaces: &[String],
    ) -> Result<Self, TokenError> {
        let sha256 = parse_digest(token_sha256).ok_or((
            "token_sha256",
            "is not 64 hexadecimal digits (the SHA-256 of the token)".to_owned(),
        ))?;
        let role = Role::parse(role).map_err(|m| ("role", m))?;
        let namespaces = match namespaces {
            [] => return Err(("namespaces", "is empty; name namespaces or [\"*\"]".into())),
            [all] if all == "*" => Namespaces::All,
            names => {
                for n in names {
                    sundial_core::names::check_name(n)
                        .map_err(|m| ("namespaces", format!("'{n}': the name {m}")))?;
                }
                Namespaces::Only(names.iter().cloned().collect())
            }
        };
        let mut name = String::from("token-");
        for b in &sha256[..4] {
            name.push_str(&format!("{b:02x}"));
        }
        Ok(ApiToken {
            sha256,
            name,
            role,
            namespaces,
        })
    }

    /// This token with `name`, the actor its changes are recorded under in the audit log
    /// (docs/security.md, "Audit log"). Without one a token is named `token-` and the first 8
    /// hexadecimal digits of its SHA-256.
    ///
    /// # Errors
    /// `("name", reason)` for a name outside the pattern of job names
    /// (`sundial_core::names::check_name`) or `anonymous`, which names a server without
    /// tokens.
    pub fn named(mut self, name: &str) -> Result<Self, TokenError> {
        sundial_core::names::check_name(name)
            .map_err(|m| ("name", format!("'{name}': the name {m}")))?;
        if name == "anonymous" {
            return Err((
                "name",
                "'anonymous' names the changes of a server without tokens; choose another".into(),
            ));
        }
        self.name = name.to_owned();
        Ok(self)
    }

    /// The token's name ([`ApiToken::named`]).
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The configured tokens, one entry per token.
#[derive(Debug, Clone, Default)]
pub struct Tokens(Vec<ApiToken>);

impl Tokens {
    /// The tokens of `entries`, in configuration order.
    ///
    /// # Errors
    /// `(i, j, field)` when entry `i` is the same token (the same digest, `field`
    /// `token_sha256`) as the earlier entry `j` — one token with two grants would take one of
    /// them silently — or has its name (`field` `name`), which would make two actors one in
    /// the audit log.
    pub fn new(entries: Vec<ApiToken>) -> Result<Self, (usize, usize, &'static str)> {
        for (i, t) in entries.iter().enumerate() {
            if let Some(j) = entries[..i].iter().position(|u| u.sha256 == t.sha256) {
                return Err((i, j, "token_sha256"));
            }
            if let Some(j) = entries[..i].iter().position(|u| u.name == t.name) {
                return Err((i, j, "name"));
            }
        }
        Ok(Tokens(entries))
    }

    /// True when no token is configured (the server then needs none).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The role and namespaces of the token `presented`, if this server knows it (the UI's
    /// session check; compared as [`authorize`] compares).
    pub fn grant(&self, presented: &str) -> Option<(Role, &Namespaces)> {
        self.find(presented).map(|t| (t.role, &t.namespaces))
    }

    /// The token whose digest is `presented`'s, if any. Every configured digest is compared,
    /// each in constant time.
    fn find(&self, presented: &str) -> Option<&ApiToken> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for t in &self.0 {
            if bool::from(t.sha256.ct_eq(&digest)) {
                found = Some(t);
            }
        }
        found
    }
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    // `from_str_radix` alone would take a sign (`+a`).
    if hex.len() != 64 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

/// The middleware that keeps the invariants of this module: passes a request on, or answers
/// it as a problem document without running it — 400 for two `Authorization` headers, 401
/// (with `WWW-Authenticate: Bearer`) for no known bearer token, 403 for a viewer's write or
/// a namespace the token does not name.
pub async fn authorize(
    State(tokens): State<Arc<Tokens>>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    // The API's description is public, as the probes are.
    if !path.starts_with("/v1/") || path == "/v1/openapi.json" {
        return next.run(request).await;
    }
    let mut values = request.headers().get_all(header::AUTHORIZATION).iter();
    let (first, second) = (values.next(), values.next());
    if second.is_some() {
        return ApiError::bad_request(
            "Authorization",
            "send one Authorization header, not several",
        )
        .into_response();
    }
    // The scheme is case-insensitive (RFC 9110 §11.1).
    let presented = first
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    let Some(token) = presented.and_then(|p| tokens.find(p)) else {
        let detail = if presented.is_some() {
            "the bearer token is not one this server knows"
        } else {
            "this server needs an Authorization: Bearer <token> header"
        };
        let mut response =
            ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", detail).into_response();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    };
    let reads = matches!(*request.method(), Method::GET | Method::HEAD)
        || (request.method() == Method::POST
            && (path == "/v1/cron/next" || path.ends_with("/jobs:plan")));
    if !reads && token.role == Role::Viewer {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "a viewer token may only read",
        )
        .into_response();
    }
    if let Some(rest) = path.strip_prefix("/v1/namespaces/") {
        let ns = rest.split('/').next().unwrap_or_default();
        // Secrets are neither read nor written with a viewer token (docs/security.md).
        if token.role == Role::Viewer && rest.split('/').nth(1) == Some("secrets") {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "a viewer token may not read or write secrets",
            )
            .into_response();
        }
        if !token.namespaces.allows(ns) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("this token may not act in namespace '{ns}'"),
            )
            .into_response();
        }
    }
    // Routes that list across namespaces (`GET /v1/namespaces`) show only the token's.
    request.extensions_mut().insert(token.namespaces.clone());
    // Who the audit log records (`audit::record_changes`).
    request
        .extensions_mut()
        .insert(sundial_store::audit::Actor::Token {
            name: token.name.clone(),
            role: token.role.as_str().to_owned(),
        });
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET_SHA256: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";

    #[test]
    fn a_token_is_found_by_its_digest_only() {
        // printf %s secret | sha256sum
        let t = ApiToken::parse(SECRET_SHA256, "viewer", &["billing".into()]).unwrap();
        // Signs parse as numbers in `from_str_radix`; a digest has none.
        let signed = format!("+{}", &SECRET_SHA256[1..]);
        assert!(ApiToken::parse(&signed, "viewer", &["billing".into()]).is_err());
        let tokens = Tokens::new(vec![t.clone()]).unwrap();
        assert_eq!(
            Tokens::new(vec![t.clone(), t.clone()]).unwrap_err(),
            (1, 0, "token_sha256")
        );
        let other = ApiToken::parse(&"ab".repeat(32), "editor", &["*".into()]).unwrap();
        let same_name = [t.clone().named("ci").unwrap(), other.named("ci").unwrap()];
        assert_eq!(Tokens::new(same_name.to_vec()).unwrap_err(), (1, 0, "name"));
        assert_eq!(t.name(), "token-2bb80d53");
        assert_eq!(t.clone().named("anonymous").unwrap_err().0, "name");
        assert_eq!(t.clone().named("a b").unwrap_err().0, "name");
        assert!(tokens.find("secret").is_some());
        assert!(tokens.find("secret ").is_none());
        assert!(tokens.find(SECRET_SHA256).is_none());
    }

    #[test]
    fn bad_token_configurations_name_their_field() {
        let ns = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for (sha, role, names, field) in [
            ("abc", "viewer", ns(&["a"]), "token_sha256"),
            (&"g".repeat(64)[..], "viewer", ns(&["a"]), "token_sha256"),
            (SECRET_SHA256, "root", ns(&["a"]), "role"),
            (SECRET_SHA256, "viewer", ns(&[]), "namespaces"),
            (SECRET_SHA256, "viewer", ns(&["Bad Name"]), "namespaces"),
            (SECRET_SHA256, "viewer", ns(&["a", "*"]), "namespaces"),
        ] {
            let (f, reason) = ApiToken::parse(sha, role, &names).unwrap_err();
            assert_eq!(f, field, "{sha} {role} {names:?}: {reason}");
        }
        assert_eq!(
            ApiToken::parse(SECRET_SHA256, "admin", &ns(&["*"]))
                .unwrap()
                .namespaces,
            Namespaces::All
        );
    }
}
