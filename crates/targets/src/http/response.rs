//! What an HTTP target's failed answer records: the body on one line, cut to its limit, read
//! for at most `SNIPPET_TIMEOUT`, and the delay `Retry-After` asks for
//! (docs/failure-classes.md).

use super::*;

/// ": " and the first 256 characters of a failed response's body (of at most its first
/// 64 KiB, read within [`SNIPPET_TIMEOUT`]), or nothing when it is empty, cannot be read or
/// does not come in time.
pub(super) async fn body_snippet<B>(mut body: B) -> String
where
    B: Body<Data = Bytes> + Unpin,
{
    const MAX: usize = 256;
    let read = tokio::time::timeout(SNIPPET_TIMEOUT, read_up_to(&mut body, 64 * 1024)).await;
    match read {
        Ok(Ok(read)) => {
            let text = String::from_utf8_lossy(&read);
            if text.trim().is_empty() {
                return String::new();
            }
            format!(": {}", one_line(&text, MAX))
        }
        Ok(Err(_)) | Err(_) => String::new(),
    }
}

/// `text` on one line, cut to `max` characters: every run of whitespace (the line breaks of an
/// HTML error page included) becomes one space, and a cut text ends with `…` (within the
/// `max`), so an error
/// message never breaks a table row or a log line.
pub(super) fn one_line(text: &str, max: usize) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let joined = words.join(" ");
    if joined.chars().count() <= max {
        joined
    } else {
        let cut: String = joined.chars().take(max.saturating_sub(1)).collect();
        format!("{}…", cut.trim_end())
    }
}

/// `Retry-After` as delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
pub(super) fn retry_after(headers: &HeaderMap, now: Timestamp) -> Option<Dur> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Dur::from_secs(secs.min(365 * 86_400)));
    }
    let when = jiff::fmt::rfc2822::parse(text).ok()?.timestamp();
    let ms = when.as_millisecond() - now.as_millisecond();
    Some(Dur::from_millis(u64::try_from(ms.max(0)).ok()?))
}
