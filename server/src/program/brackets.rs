//! Where a program's brackets go wrong, for the message of a syntax error.
//!
//! The Starlark parser reports the first token it could not take. After an unclosed `(` that
//! token is often a line or more below the mistake (the next statement's first word), so the
//! caret points at correct code. This scan skips strings and comments, pairs brackets, and
//! names the first one left open or closed by the wrong kind: where the operator should look.

/// A bracket that does not pair, with 1-based positions in characters.
#[derive(Debug, PartialEq, Eq)]
pub enum Unpaired {
    NeverClosed { open: char, line: usize, column: usize },
    WrongClose { open: char, line: usize, column: usize, close: char, close_line: usize, close_column: usize },
}

impl std::fmt::Display for Unpaired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unpaired::NeverClosed { open, line, column } => {
                write!(f, "the `{open}` opened at line {line}, column {column} is never closed")
            }
            Unpaired::WrongClose { open, line, column, close, close_line, close_column } => write!(
                f,
                "the `{open}` opened at line {line}, column {column} is closed by `{close}` at line {close_line}, column {close_column}"
            ),
        }
    }
}

/// The first bracket of `source` that does not pair, or `None` when they all do (or a string
/// is left open, which the parser's own message already names).
pub fn first_unpaired(source: &str) -> Option<Unpaired> {
    let mut open: Vec<(char, usize, usize)> = Vec::new();
    let mut chars = Positioned::new(source);
    while let Some((c, line, column)) = chars.next() {
        match c {
            '#' => chars.skip_line(),
            '"' | '\'' => chars.skip_string(c)?,
            '(' | '[' | '{' => open.push((c, line, column)),
            ')' | ']' | '}' => match open.pop() {
                Some((o, _, _)) if closer(o) == c => {}
                Some((o, l, col)) => {
                    return Some(Unpaired::WrongClose {
                        open: o,
                        line: l,
                        column: col,
                        close: c,
                        close_line: line,
                        close_column: column,
                    })
                }
                None => return None,
            },
            _ => {}
        }
    }
    open.first().map(|&(open, line, column)| Unpaired::NeverClosed { open, line, column })
}

fn closer(open: char) -> char {
    match open {
        '(' => ')',
        '[' => ']',
        _ => '}',
    }
}

/// Characters with their 1-based line and column.
struct Positioned<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    column: usize,
}

impl<'a> Positioned<'a> {
    fn new(source: &'a str) -> Self {
        Positioned { chars: source.chars().peekable(), line: 1, column: 0 }
    }

    fn next(&mut self) -> Option<(char, usize, usize)> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.column = 0;
        } else {
            self.column += 1;
        }
        Some((c, self.line, self.column))
    }

    fn skip_line(&mut self) {
        while self.chars.peek().is_some_and(|&c| c != '\n') {
            self.next();
        }
    }

    /// Skips a string whose opening `quote` was just read, triple-quoted or not. `None` when
    /// the source ends inside it.
    fn skip_string(&mut self, quote: char) -> Option<()> {
        let triple = self.chars.peek() == Some(&quote) && {
            self.next();
            if self.chars.peek() != Some(&quote) {
                return Some(()); // `""`: the empty string
            }
            self.next();
            true
        };
        let mut closing_run = 0;
        loop {
            let (c, _, _) = self.next()?;
            match c {
                '\\' => {
                    self.next()?;
                    closing_run = 0;
                }
                c if c == quote => {
                    closing_run += 1;
                    if !triple || closing_run == 3 {
                        return Some(());
                    }
                }
                '\n' if !triple => return None,
                _ => closing_run = 0,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_comments_hold_no_brackets() {
        assert_eq!(first_unpaired("x = f(\"(\", '[', \"\"\"{\n)\"\"\", '') # (\n"), None);
        assert_eq!(first_unpaired("x = \"\\\"(\"\n"), None);
        assert_eq!(first_unpaired("x = '''a''' + [1]\n"), None);
    }

    #[test]
    fn the_first_bracket_left_open_is_named() {
        let found = first_unpaired("f(a,\n  [1, 2\n").unwrap();
        assert_eq!(found, Unpaired::NeverClosed { open: '(', line: 1, column: 2 });
    }

    #[test]
    fn a_wrong_close_names_both_ends() {
        let found = first_unpaired("x = {1: (2]}\n").unwrap();
        assert_eq!(
            found,
            Unpaired::WrongClose { open: '(', line: 1, column: 9, close: ']', close_line: 1, close_column: 11 }
        );
    }

    #[test]
    fn an_unterminated_string_is_left_to_the_parser() {
        assert_eq!(first_unpaired("f(\"abc\n"), None);
        assert_eq!(first_unpaired("f(\"\"\"abc\n"), None);
    }
}
