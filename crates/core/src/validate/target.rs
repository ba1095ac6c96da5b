//! The job rules for `target` (HTTP, NATS, AMQP, Redis, container) and its headers and named
//! connection, as methods of the validation walker; each bad field is one error at its path.

use super::*;

impl Walker {
    /// At most [`MAX_HEADERS`] headers, each value at most [`MAX_HEADER_VALUE_LEN`] bytes.
    pub(crate) fn header_sizes(&mut self, headers: &BTreeMap<String, String>) {
        if headers.len() > MAX_HEADERS {
            self.err(
                "target.headers",
                format!(
                    "has {} headers; at most {MAX_HEADERS} are allowed",
                    headers.len()
                ),
            );
        }
        for (k, v) in headers {
            if v.len() > MAX_HEADER_VALUE_LEN {
                self.err(
                    format!("target.headers.{k}"),
                    format!("value is longer than {MAX_HEADER_VALUE_LEN} bytes"),
                );
            }
        }
    }

    pub(crate) fn target(&mut self, value: &Value, ctx: &Context) -> Option<TargetSpec> {
        let obj = self.object(value, "target")?;
        let kind = self.req_str(obj, "type", "target.type")?;
        let known: &[&str] = match kind.as_str() {
            "http" => &["type", "method", "url", "headers", "body", "success_codes"],
            "nats" => &["type", "connection", "subject", "payload", "headers"],
            "amqp" => &[
                "type",
                "connection",
                "exchange",
                "routing_key",
                "payload",
                "properties",
            ],
            "redis" => &["type", "connection", "stream", "fields"],
            "container" => &[
                "type",
                "connection",
                "image",
                "command",
                "env",
                "permanent_exit_codes",
            ],
            other => {
                self.err(
                    "target.type",
                    format!("'{other}' is not one of http, nats, amqp, redis, container"),
                );
                return None;
            }
        };
        self.unknown_fields(obj, "target", known, &[]);
        let before = self.errors.len();
        let connection = (kind != "http")
            .then(|| self.connection(obj, &kind, ctx))
            .flatten();
        let target = match kind.as_str() {
            "http" => self.http_target(obj, ctx).map(TargetSpec::Http),
            "nats" => {
                let subject = self.req_str(obj, "subject", "target.subject");
                if let Some(s) = &subject
                    && (s.contains(char::is_whitespace) || s.contains(['*', '>']))
                {
                    self.err(
                        "target.subject",
                        "must be a concrete subject without spaces or wildcards",
                    );
                }
                let payload = self
                    .opt_str(obj, "payload", "target.payload")
                    .unwrap_or_default();
                let headers = self.string_map(obj.get("headers"), "target.headers");
                self.header_sizes(&headers);
                Some(TargetSpec::Nats(NatsTarget {
                    connection: connection.clone()?,
                    subject: subject?,
                    payload,
                    headers,
                }))
            }
            "amqp" => {
                let exchange = self
                    .opt_str(obj, "exchange", "target.exchange")
                    .unwrap_or_default();
                let routing_key = self
                    .opt_str(obj, "routing_key", "target.routing_key")
                    .unwrap_or_default();
                let payload = self
                    .opt_str(obj, "payload", "target.payload")
                    .unwrap_or_default();
                let properties = self.string_map(obj.get("properties"), "target.properties");
                Some(TargetSpec::Amqp(AmqpTarget {
                    connection: connection.clone()?,
                    exchange,
                    routing_key,
                    payload,
                    properties,
                }))
            }
            "redis" => {
                let stream = self.req_str(obj, "stream", "target.stream");
                let fields = self.string_map(obj.get("fields"), "target.fields");
                Some(TargetSpec::Redis(RedisTarget {
                    connection: connection.clone()?,
                    stream: stream?,
                    fields,
                }))
            }
            _ => {
                let image = self.req_str(obj, "image", "target.image");
                let command = self.string_list(obj.get("command"), "target.command");
                let env = self.string_map(obj.get("env"), "target.env");
                let permanent_exit_codes = match obj.get("permanent_exit_codes") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(items)) => items
                        .iter()
                        .enumerate()
                        .filter_map(|(i, v)| match v.as_i64() {
                            Some(c) if (1..=255).contains(&c) => Some(c),
                            _ => {
                                self.err(
                                    format!("target.permanent_exit_codes.{i}"),
                                    format!("{v} is not an exit code in 1-255"),
                                );
                                None
                            }
                        })
                        .collect(),
                    Some(other) => {
                        self.err(
                            "target.permanent_exit_codes",
                            format!("must be an array, not {}", type_name(other)),
                        );
                        Vec::new()
                    }
                };
                Some(TargetSpec::Container(ContainerTarget {
                    connection: connection.clone()?,
                    image: image?,
                    command,
                    env,
                    permanent_exit_codes,
                }))
            }
        };
        target.filter(|_| self.errors.len() == before)
    }

    pub(crate) fn connection(
        &mut self,
        obj: &Map<String, Value>,
        kind: &str,
        ctx: &Context,
    ) -> Option<String> {
        let name = self.req_str(obj, "connection", "target.connection")?;
        match ctx.connections.get(&name) {
            Some(t) if t == kind => Some(name),
            Some(t) => {
                self.err(
                    "target.connection",
                    format!("'{name}' is a {t} connection, not {kind}"),
                );
                None
            }
            None => {
                let known: Vec<_> = ctx
                    .connections
                    .iter()
                    .filter(|(_, t)| *t == kind)
                    .map(|(n, _)| n.as_str())
                    .collect();
                let hint = if known.is_empty() {
                    format!("the server configures no {kind} connection")
                } else {
                    format!("configured {kind} connections: {}", known.join(", "))
                };
                self.err(
                    "target.connection",
                    format!("unknown connection '{name}'; {hint}"),
                );
                None
            }
        }
    }

    pub(crate) fn http_target(
        &mut self,
        obj: &Map<String, Value>,
        ctx: &Context,
    ) -> Option<HttpTarget> {
        let method = self
            .opt_str(obj, "method", "target.method")
            .unwrap_or_else(|| "POST".into())
            .to_ascii_uppercase();
        if !["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"].contains(&method.as_str())
        {
            self.err(
                "target.method",
                format!("'{method}' is not one of GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"),
            );
        }
        let url = self.req_str(obj, "url", "target.url");
        if let Some(u) = &url {
            self.check_url(u, ctx.http_allow.as_deref());
        }
        let headers = self.string_map(obj.get("headers"), "target.headers");
        self.header_sizes(&headers);
        for (k, v) in &headers {
            let token = !k.is_empty()
                && k.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            let lower = k.to_ascii_lowercase();
            if !token {
                self.err(format!("target.headers.{k}"), "is not a valid header name");
            } else if SUNDIAL_HEADERS.contains(&lower.as_str()) {
                self.err(
                    format!("target.headers.{k}"),
                    "is set by Sundial on every request",
                );
            } else if MESSAGE_HEADERS.contains(&lower.as_str()) {
                self.err(
                    format!("target.headers.{k}"),
                    "is set by the HTTP client from the URL and the body",
                );
            } else if v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                self.err(
                    format!("target.headers.{k}"),
                    "value must not contain CR, LF or NUL",
                );
            }
        }
        let body = self.opt_str(obj, "body", "target.body");
        if body.as_ref().is_some_and(|b| b.len() > 256 * 1024) {
            self.err("target.body", "is larger than 256 KiB");
        }
        let success_codes = match obj.get("success_codes") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, v)| match v.as_u64() {
                    Some(c) if (100..=599).contains(&c) => u16::try_from(c).ok(),
                    _ => {
                        self.err(
                            format!("target.success_codes.{i}"),
                            format!("{v} is not an HTTP status in 100-599"),
                        );
                        None
                    }
                })
                .collect(),
            Some(other) => {
                self.err(
                    "target.success_codes",
                    format!("must be an array, not {}", type_name(other)),
                );
                Vec::new()
            }
        };
        Some(HttpTarget {
            method,
            url: url?,
            headers,
            body,
            success_codes,
        })
    }
}
