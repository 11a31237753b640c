//! Makes text from peers and files safe to print: strips terminal escape sequences, C0/C1
//! controls, bidirectional overrides and zero-width characters, and clamps length.
#![forbid(unsafe_code)]

/// Removes escape sequences and invisible or direction-changing characters, keeping `\n` and
/// `\t` so multi-line message bodies stay readable.
pub fn text(input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    let mut chars = input.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => skip_escape(&mut chars),
            // C1 CSI/OSC/DCS introducers start sequences too; drop their bodies.
            '\u{9b}' => skip_csi(&mut chars),
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            '\n' | '\t' => out.push(c),
            c if is_invisible(c) => {}
            c => out.push(c),
        }
    }
    out
}

/// One display line: like [`text`] but newlines and tabs become spaces, and the result is
/// clamped to `max_chars` characters (with `…` when cut).
pub fn line(input: &str, max_chars: usize) -> String {
    let cleaned: String = text(input)
        .chars()
        .map(|c| if c == '\n' || c == '\t' { ' ' } else { c })
        .collect();
    clamp(&cleaned, max_chars)
}

/// Cuts to at most `max_chars` characters, marking the cut with `…`.
pub fn clamp(input: &str, max_chars: usize) -> String {
    if input.chars().count() <= max_chars {
        return input.to_string();
    }
    let mut out: String = input.chars().take(max_chars.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn is_invisible(c: char) -> bool {
    let u = c as u32;
    u < 0x20
        || (0x7f..=0x9f).contains(&u)
        || matches!(u, 0x200b..=0x200f | 0x202a..=0x202e | 0x2060..=0x2064 | 0x2066..=0x2069 | 0xfeff)
}

fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.peek() {
        Some('[') => {
            chars.next();
            skip_csi(chars);
        }
        Some(']') | Some('P') | Some('X') | Some('^') | Some('_') => {
            chars.next();
            skip_string(chars);
        }
        Some(_) => {
            // Two-character escape (ESC c, ESC 7, ESC ( B …): drop the next char as well.
            chars.next();
        }
        None => {}
    }
}

fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    // Parameters and intermediates run up to a final byte in 0x40..=0x7e.
    for c in chars.by_ref() {
        if ('\u{40}'..='\u{7e}').contains(&c) {
            return;
        }
    }
}

fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    // OSC/DCS/PM/APC bodies end at BEL, ST (ESC \) or C1 ST.
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' => {
                if chars.peek() == Some(&'\\') {
                    chars.next();
                }
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_csi_osc_and_invisibles() {
        assert_eq!(text("a\u{1b}[31mred\u{1b}[0m b"), "ared b");
        assert_eq!(text("x\u{1b}]0;title\u{7}y"), "xy");
        assert_eq!(
            text("x\u{1b}]8;;http://e\u{1b}\\link\u{1b}]8;;\u{1b}\\y"),
            "xlinky"
        );
        assert_eq!(text("ab\u{202e}cd\u{200b}e\r\u{0}f"), "abcdef");
        assert_eq!(text("line1\nline2\tx"), "line1\nline2\tx");
        assert_eq!(text("\u{9b}2Jz"), "z");
    }

    #[test]
    fn line_folds_and_clamps() {
        assert_eq!(line("a\nb", 10), "a b");
        assert_eq!(line("abcdef", 4), "abc…");
        assert_eq!(line("abc", 3), "abc");
    }
}
