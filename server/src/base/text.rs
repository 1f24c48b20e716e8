//! Text shown to a person on a terminal: what came from a client, a program or a service may
//! hold control characters (an escape sequence, a carriage return forging a line), so they are
//! shown escaped.

/// `text` with every control character escaped (`\n` as `\n`, others as `\u{1b}`).
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// At most `most` characters of `text`, saying how many more there were and where the whole
/// is (`whole_in`, such as "--json has it whole").
pub fn clipped(text: &str, most: usize, whole_in: &str) -> String {
    let count = text.chars().count();
    if count <= most {
        return text.to_string();
    }
    let kept: String = text.chars().take(most).collect();
    format!("{kept}... ({} more characters; {whole_in})", count - most)
}

/// `word` as one word a POSIX shell reads back unchanged: as it is when it holds only
/// characters a shell leaves alone, else in single quotes (a quote in it closed and escaped).
pub fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:,=@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_path_is_quoted_for_a_shell_only_when_it_must_be() {
        assert_eq!(super::shell_word("/srv/shop/manifest.json"), "/srv/shop/manifest.json");
        assert_eq!(super::shell_word("/srv/my shop/it's.json"), r"'/srv/my shop/it'\''s.json'");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(super::printable("a\u{1b}]0;x\u{7}\r\nb é"), "a\\u{1b}]0;x\\u{7}\\r\\nb é");
    }
}
