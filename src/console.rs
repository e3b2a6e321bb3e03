//! What kvmeter says on the terminal, which must never end a run. `println!` and `eprintln!`
//! panic when their stream is closed (`kvmeter run … 2>&1 | head -1`), and the panic hook's own
//! `eprintln!` then panicked inside the panic, which aborts: the run directory stayed `running`.
//! Every line kvmeter prints goes through these macros instead, and a write that fails is
//! dropped: the run directory, not the terminal, is the record of a run.
//!
//! A server's bytes reach messages (its version, the reply it was refused for), and a terminal
//! obeys the control sequences in what it prints: a fake memcached's version line set the
//! window title and cleared the screen. `errln!` and `excerpt` of a server's text therefore
//! write control characters as escapes (`printable`).

use std::borrow::Cow;

/// Whether `c` is shown as an escape: a control character, newline and tab aside.
fn hidden(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// `text` with every control character but newline and tab written as its escape (`\u{1b}`).
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `println!` that ignores a closed or failing stdout.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// `print!` that ignores a closed or failing stdout.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($t)*);
    }};
}

/// `eprintln!` that ignores a closed or failing stderr and escapes control characters.
macro_rules! errln {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock());
    }};
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($t)*);
        let _ = writeln!(std::io::stderr().lock(), "{}", $crate::console::printable(&text));
    }};
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_become_escapes() {
        assert_eq!(printable("VERSION 1.6\nok\t"), "VERSION 1.6\nok\t");
        assert_eq!(
            printable("\u{1b}]0;PWNED\u{7}\u{1b}[2J\0x\r"),
            "\\u{1b}]0;PWNED\\u{7}\\u{1b}[2J\\u{0}x\\r"
        );
    }
}
