//! `@alias` / `@peerId` parsing shared by the CLI, chat and the MCP tools: which leading name
//! is the direct recipient, which later names are inline references, and recipient completion.
//!
//! A leading mention routes; an inline mention is metadata only and never changes the text.
//! Names follow the alias rules of [`crate::identity::validate_alias`] or the peer-id shape
//! `p-` + 24 lowercase hex digits. Emails (`a@b.c`) and `@` inside words are not mentions.
#![forbid(unsafe_code)]

/// The result of parsing one composer line or message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mention {
    /// The name after a leading `@` (without the `@`), when the input starts with one.
    pub leading_recipient: Option<String>,
    /// The message text: the input after the leading mention (its separating whitespace
    /// removed), or the whole input unchanged when there is no leading mention.
    pub body: String,
    /// Names mentioned later in the body, without `@`, first occurrence order, no duplicates.
    pub inline_refs: Vec<String>,
}

/// Length of the hex part of a peer id (`p-` + 24 hex digits).
const PEER_ID_HEX: usize = 24;

/// True for the exact peer-id shape `p-` followed by 24 lowercase hex digits.
pub fn is_peer_id(s: &str) -> bool {
    match s.strip_prefix("p-") {
        Some(hex) => {
            hex.len() == PEER_ID_HEX && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        }
        None => false,
    }
}

/// True when `s` (without `@`) can name a peer: a valid alias or a peer id.
pub fn is_name(s: &str) -> bool {
    is_peer_id(s) || crate::identity::validate_alias(s).is_ok()
}

/// Normalizes a recipient given as `alias`, `@alias` or an exact peer id: strips one leading
/// `@` and returns the name, or `None` when it is not a valid name.
pub fn normalize_target(s: &str) -> Option<String> {
    let name = s.strip_prefix('@').unwrap_or(s);
    is_name(name).then(|| name.to_string())
}

/// Parses `input`. Never panics and never changes the body text of an inline mention.
pub fn parse(input: &str) -> Mention {
    let (leading_recipient, body) = match split_leading(input) {
        Some((name, body)) => (Some(name), body.to_string()),
        None => (None, input.to_string()),
    };
    let inline_refs = inline_refs(&body);
    Mention {
        leading_recipient,
        body,
        inline_refs,
    }
}

/// The inline references of `input`: what `parse(input).inline_refs` gives, without copying
/// the text into a body. A send and every message view want only these, on text as long as a
/// message may be.
pub fn inline_mentions(input: &str) -> Vec<String> {
    inline_refs(split_leading(input).map_or(input, |(_, body)| body))
}

/// A leading `@name` followed by whitespace (or the end of input); an optional `:` or `,`
/// right after the name is accepted as in "@bob: ready?".
fn split_leading(input: &str) -> Option<(String, &str)> {
    let rest = input.trim_start().strip_prefix('@')?;
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let (token, after) = rest.split_at(end);
    let name = token.strip_suffix([':', ',']).unwrap_or(token);
    if !is_name(name) {
        return None;
    }
    Some((name.to_string(), after.trim_start()))
}

/// Characters that may directly precede an inline `@` (besides whitespace and start of text).
fn opens_mention(c: char) -> bool {
    c.is_whitespace() || "([{\"'".contains(c)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.".contains(c)
}

/// Jumps from one `@` to the next (a byte search) instead of walking every character: text
/// without an `@` costs one scan.
fn inline_refs(body: &str) -> Vec<String> {
    let mut refs: Vec<String> = Vec::new();
    for (i, _) in body.match_indices('@') {
        let prev = body[..i].chars().next_back();
        if prev.is_none_or(opens_mention)
            && let Some(name) = name_at(&body[i + 1..])
            && !refs.iter().any(|r| r == &name)
        {
            refs.push(name);
        }
    }
    refs
}

/// The mention name starting at `rest` (just after `@`): name characters, minus trailing dots
/// (sentence punctuation), rejected when another `@` follows (an address, not a mention).
fn name_at(rest: &str) -> Option<String> {
    let end = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
    if rest[end..].starts_with('@') {
        return None;
    }
    let name = rest[..end].trim_end_matches('.');
    is_name(name).then(|| name.to_string())
}

/// Recipient completion: candidates starting with `prefix` (an optional leading `@` is
/// ignored; ASCII case-insensitive). An exact match comes first, the rest sorted, no duplicates.
pub fn complete(prefix: &str, candidates: &[String]) -> Vec<String> {
    let p = prefix
        .strip_prefix('@')
        .unwrap_or(prefix)
        .to_ascii_lowercase();
    let mut out: Vec<String> = candidates
        .iter()
        .filter(|c| c.to_ascii_lowercase().starts_with(&p))
        .cloned()
        .collect();
    out.sort_by(|a, b| (a.to_ascii_lowercase() != p, a).cmp(&(b.to_ascii_lowercase() != p, b)));
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The inline references found the slow way: every character, remembering the previous.
    fn walked_refs(body: &str) -> Vec<String> {
        let mut refs: Vec<String> = Vec::new();
        let mut prev: Option<char> = None;
        for (i, c) in body.char_indices() {
            if c == '@'
                && prev.is_none_or(opens_mention)
                && let Some(name) = name_at(&body[i + 1..])
                && !refs.contains(&name)
            {
                refs.push(name);
            }
            prev = Some(c);
        }
        refs
    }

    fn check(input: &str, leading: Option<&str>, body: &str, refs: &[&str]) {
        let m = parse(input);
        assert_eq!(
            m.leading_recipient.as_deref(),
            leading,
            "leading of {input:?}"
        );
        assert_eq!(m.body, body, "body of {input:?}");
        assert_eq!(m.inline_refs, refs, "refs of {input:?}");
    }

    #[test]
    fn leading_recipient_and_body() {
        check("@bob hello there", Some("bob"), "hello there", &[]);
        check("  @bob\n\nmulti\nline", Some("bob"), "multi\nline", &[]);
        check("@bob: ready?", Some("bob"), "ready?", &[]);
        check("@bob", Some("bob"), "", &[]);
        let pid = "p-0123456789abcdef01234567";
        check(&format!("@{pid} hi"), Some(pid), "hi", &[]);
    }

    #[test]
    fn invalid_leading_names_leave_text_alone() {
        check("@-bob hi", None, "@-bob hi", &[]);
        check("@ hi", None, "@ hi", &[]);
        check("@bob!x hi", None, "@bob!x hi", &["bob"]);
        check("hello @bob", None, "hello @bob", &["bob"]);
    }

    #[test]
    fn inline_refs_are_metadata_only() {
        check(
            "@alice ask @bob and (@carol), then @bob.",
            Some("alice"),
            "ask @bob and (@carol), then @bob.",
            &["bob", "carol"],
        );
        check(
            "mail me at a@b.c or x@y",
            None,
            "mail me at a@b.c or x@y",
            &[],
        );
        check("user@@bob and @x@y.z", None, "user@@bob and @x@y.z", &[]);
        check("@@bob", None, "@@bob", &[]);
    }

    #[test]
    fn peer_id_shape() {
        assert!(is_peer_id("p-0123456789abcdef01234567"));
        assert!(!is_peer_id("p-0123456789ABCDEF01234567"));
        assert!(!is_peer_id("p-0123"));
        assert_eq!(normalize_target("@alice").as_deref(), Some("alice"));
        assert_eq!(normalize_target("alice").as_deref(), Some("alice"));
        assert_eq!(normalize_target("@@alice"), None);
        assert_eq!(normalize_target(""), None);
    }

    #[test]
    fn completion_orders_exact_first() {
        let c: Vec<String> = ["bobby", "Bob", "bob", "alice", "bob"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(complete("@bob", &c), vec!["Bob", "bob", "bobby"]);
        assert_eq!(complete("al", &c), vec!["alice"]);
        assert!(complete("zed", &c).is_empty());
        assert_eq!(complete("", &c).len(), 4);
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_keeps_inline_text(s in "\\PC{0,80}") {
            let m = parse(&s);
            if m.leading_recipient.is_none() {
                prop_assert_eq!(&m.body, &s);
            }
            for r in &m.inline_refs {
                prop_assert!(is_name(r));
            }
        }

        #[test]
        fn parse_never_panics_on_mention_heavy_input(s in "[@a-z .:,\\n\\t(@)-]{0,60}") {
            let m = parse(&s);
            prop_assert!(m.body.len() <= s.len());
        }

        /// The `@`-to-`@` scan finds what a walk over every character finds, and
        /// `inline_mentions` is `parse`'s `inline_refs`.
        #[test]
        fn inline_mentions_match_a_character_walk(
            s in "[@a-zA-Z0-9 .:,_\\n\\t(\\[{\"'@)é☃-]{0,80}"
        ) {
            let m = parse(&s);
            prop_assert_eq!(&inline_mentions(&s), &m.inline_refs);
            prop_assert_eq!(&m.inline_refs, &walked_refs(&m.body));
        }
    }
}
