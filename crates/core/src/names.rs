//! Names of namespaces and jobs: `[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?` (docs/README.md,
//! "Conventions").

/// Maximum length of a namespace or job name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Checks a namespace or job name.
///
/// # Errors
/// A lowercase message saying what is wrong, suitable for a field error.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "is {} characters long; at most {MAX_NAME_LEN} are allowed",
            name.len()
        ));
    }
    let ok_edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok_inner = |c: u8| ok_edge(c) || matches!(c, b'.' | b'_' | b'-');
    let bytes = name.as_bytes();
    if let Some(bad) = name.chars().find(|c| !c.is_ascii() || !ok_inner(*c as u8)) {
        return Err(format!(
            "contains '{bad}'; use lowercase letters, digits, '.', '_' and '-'"
        ));
    }
    if !ok_edge(bytes[0]) || !ok_edge(bytes[bytes.len() - 1]) {
        return Err("must start and end with a lowercase letter or a digit".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_rejects_per_the_spec_pattern() {
        for ok in ["a", "0", "nightly-invoices", "a.b_c-d", &"x".repeat(128)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "A",
            "-a",
            "a-",
            "a b",
            "é",
            "a/b",
            &"x".repeat(129),
            "_a",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
