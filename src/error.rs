//! Error kinds with fixed exit codes (after ripgrep): 0 ok, 1 the run failed, 2 bad input or
//! setup, 130 interrupted.

use std::fmt;

/// Bad input: one line naming the flag, file, key or value, what was expected, what to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl UsageError {
    pub fn new(msg: impl Into<String>) -> Self {
        UsageError(msg.into())
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_INTERRUPTED: i32 = 130;

/// The exit code for an error: 2 if any cause in the chain is a `UsageError`.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err
        .chain()
        .any(|c| c.downcast_ref::<UsageError>().is_some())
    {
        EXIT_USAGE
    } else {
        EXIT_FAILED
    }
}

pub fn usage<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(UsageError::new(msg).into())
}
