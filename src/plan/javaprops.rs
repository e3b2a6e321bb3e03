//! Java `Properties` file syntax, as YCSB reads `-P` files (ycsb-workload-spec §1.1).
//!
//! Written by hand because no crate reproduces Java's exact rules: keys end at the first
//! unescaped `=`, `:` or whitespace, trailing whitespace of a value is kept, a trailing
//! backslash continues a line, `\uXXXX` escapes, and the file is ISO-8859-1.

/// Parses properties text (already decoded from ISO-8859-1), returning (key, value, line).
pub fn parse(text: &str) -> Result<Vec<(String, String, usize)>, String> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.split('\n').map(|l| l.trim_end_matches('\r')).collect();
    let mut i = 0;
    while i < lines.len() {
        let start_line = i + 1;
        let first = lines[i].trim_start_matches([' ', '\t', '\x0c']);
        i += 1;
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        let mut logical = String::from(first);
        while ends_with_odd_backslashes(&logical) {
            logical.pop();
            if i >= lines.len() {
                break;
            }
            logical.push_str(lines[i].trim_start_matches([' ', '\t', '\x0c']));
            i += 1;
        }
        let (k, v) = split_key_value(&logical);
        let key = unescape(k).map_err(|e| format!("line {start_line}: {e}"))?;
        let value = unescape(v).map_err(|e| format!("line {start_line}: {e}"))?;
        out.push((key, value, start_line));
    }
    Ok(out)
}

fn ends_with_odd_backslashes(s: &str) -> bool {
    s.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

fn split_key_value(line: &str) -> (&str, &str) {
    let bytes = line.as_bytes();
    let mut i = 0;
    let mut escaped = false;
    while i < bytes.len() {
        let c = bytes[i];
        if escaped {
            escaped = false;
        } else if c == b'\\' {
            escaped = true;
        } else if c == b'=' || c == b':' || c == b' ' || c == b'\t' || c == b'\x0c' {
            break;
        }
        i += 1;
    }
    let key = &line[..i];
    let mut j = i;
    while j < bytes.len() && matches!(bytes[j], b' ' | b'\t' | b'\x0c') {
        j += 1;
    }
    if j < bytes.len() && (bytes[j] == b'=' || bytes[j] == b':') {
        j += 1;
        while j < bytes.len() && matches!(bytes[j], b' ' | b'\t' | b'\x0c') {
            j += 1;
        }
    }
    (key, &line[j..])
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| hex.len() == 4)
                    .ok_or_else(|| format!("malformed \\u escape '\\u{hex}'"))?;
                out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
}

/// Decodes ISO-8859-1 bytes (every byte is the code point of the same value).
pub fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| b as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(text: &str) -> Vec<(String, String)> {
        parse(text)
            .unwrap()
            .into_iter()
            .map(|(k, v, _)| (k, v))
            .collect()
    }

    #[test]
    fn java_rules() {
        // Trailing whitespace of a value is kept (spec §12.10).
        assert_eq!(kv("a = 1 "), [("a".into(), "1 ".into())]);
        assert_eq!(
            kv("# c\n! c\n  b:2\nc 3\nd=\n"),
            [
                ("b".into(), "2".into()),
                ("c".into(), "3".into()),
                ("d".into(), "".into())
            ]
        );
        assert_eq!(kv("k=one \\\n    two"), [("k".into(), "one two".into())]);
        assert_eq!(kv("k\\=x=\\u0041\\tB"), [("k=x".into(), "A\tB".into())]);
        assert_eq!(
            kv("k=a\\\\\nz=1"),
            [("k".into(), "a\\".into()), ("z".into(), "1".into())]
        );
        assert_eq!(kv("x=y=z"), [("x".into(), "y=z".into())]);
        assert!(parse("k=\\u00zz").is_err());
        assert_eq!(latin1(&[0x61, 0xe9]), "aé");
    }
}
