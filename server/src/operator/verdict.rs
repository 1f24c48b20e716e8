//! The operator's word on a waiting run, checked the same way whether `warden resolve` writes
//! it beside a stopped server or hands it to a live one through the admin channel.

use std::path::Path;

use crate::store::journal::{Journal, JournalRecord, OpState, Word};

/// The largest result an operator may give for an action (`resolve --happened`).
pub const RESOLUTION_BYTES_MAX: usize = 1024 * 1024;
/// The longest note an operator may give with a word (`resolve --note`).
pub const NOTE_CHARS_MAX: usize = 500;
/// The longest account name kept as who gave a word.
pub const ACCOUNT_CHARS_MAX: usize = 64;

/// Who gives the word, checked against its bounds: what the journal keeps of it.
pub fn word(account: Option<&str>, note: Option<&str>) -> Result<Word, String> {
    let account = account.filter(|account| !account.is_empty()).unwrap_or("unknown");
    if account.chars().count() > ACCOUNT_CHARS_MAX {
        return Err(format!("the account name is over {ACCOUNT_CHARS_MAX} characters"));
    }
    if let Some(note) = note.filter(|note| note.chars().count() > NOTE_CHARS_MAX) {
        return Err(format!("--note: {} characters, over the limit of {NOTE_CHARS_MAX}", note.chars().count()));
    }
    // Shown in logs and on terminals: a control character there could forge or hide a line.
    if note.is_some_and(|note| note.chars().any(char::is_control)) || account.chars().any(char::is_control) {
        return Err("--note and the account name take no control characters (a newline, an escape)".to_string());
    }
    Ok(Word { account: account.to_string(), note: note.map(str::to_string) })
}

/// The record that says action `op` of `journal` happened (with `happened`, the result as the
/// operator gives it, in the action's shape) or did not (`None`).
pub fn resolved(
    journal: &Journal,
    journal_path: &Path,
    op: u64,
    happened: Option<&str>,
    (at_ms, by): (u64, Option<Word>),
) -> Result<JournalRecord, String> {
    let shown = journal_path.display();
    let action = match journal.ops.get(&op) {
        Some(OpState::Begun(action)) => serde_json::from_value::<crate::broker::Action>(action.clone())
            .map_err(|e| format!("{shown}: the begin record of action {op} does not parse: {e}"))?,
        Some(_) => return Err(format!("{shown}: action {op} is not in doubt")),
        None => return Err(format!("{shown}: the run has no action {op}")),
    };
    if action.kind == crate::broker::Kind::Model {
        // A model call is sent again at a start and charged for every send: a verdict would
        // lose the charge of the sends crashes interrupted.
        return Err(format!(
            "{shown}: action {op} is a model call: it is sent again when its run resumes, never decided by an \
             operator; a halted run resumes with `warden resolve --journal {shown} --resume`"
        ));
    }
    let result = match happened {
        Some(text) if text.len() > RESOLUTION_BYTES_MAX => {
            return Err(format!("--happened: {} bytes, over the limit of {RESOLUTION_BYTES_MAX}", text.len()))
        }
        Some(text) => {
            let value =
                serde_json::from_str::<serde_json::Value>(text).map_err(|e| format!("--happened: not JSON: {e}"))?;
            if crate::base::json::depth(&value) > crate::limits::VALUE_DEPTH_MAX {
                return Err(format!("--happened: nested deeper than {} levels", crate::limits::VALUE_DEPTH_MAX));
            }
            Some(crate::broker::resolution::checked(&action, value)?)
        }
        None => None,
    };
    Ok(JournalRecord::Resolved { op, happened: result.is_some(), result, at_ms, by })
}

/// What `resolve` says it recorded.
pub fn resolved_text(op: u64, happened: bool) -> String {
    let verdict = if happened { "happened" } else { "did not happen (it may be performed again)" };
    format!("action {op} recorded as {verdict}")
}

#[cfg(test)]
mod tests {
    /// Who gave a word is bounded and shown safely: a long note, or one with a control
    /// character that could forge a log line or clear a terminal, is refused.
    #[test]
    fn a_word_is_bounded_and_printable() {
        assert_eq!(super::word(None, None).unwrap().account, "unknown");
        assert_eq!(super::word(Some("alice"), Some("seen")).unwrap().note.as_deref(), Some("seen"));
        assert!(super::word(Some("alice"), Some(&"x".repeat(super::NOTE_CHARS_MAX + 1))).is_err());
        assert!(super::word(Some("alice"), Some("ok\n2026 INFO forged")).is_err());
        assert!(super::word(Some("al\u{1b}[2Jice"), None).is_err());
        assert!(super::word(Some(&"a".repeat(super::ACCOUNT_CHARS_MAX + 1)), None).is_err());
    }
}
