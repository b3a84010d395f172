//! Where the YAML library's scanner opens and closes flow collections, found in one linear pass
//! without building anything, so that deep flow nesting is refused before the library sees it.
//!
//! The library (`serde_norway`, on a port of libyaml) spends time proportional to the flow
//! nesting depth on every token it scans, so `[[[[…` or `{a: {a: …` some ten thousand deep
//! takes seconds. This pass follows the library's scanner token by token — the same rules for
//! comments, quoted, block and plain scalars, tags, anchors, document markers, indentation and
//! simple keys — but keeps only what decides where the next token starts, and reports every
//! change of the flow level at the byte where the library makes it. Up to the point where the
//! library stops with an error the levels are the library's own (the fuzz target `yaml_scan`
//! compares both on every input it tries); past that point this pass goes on where the library
//! would have given up, which can only report more nesting, never less.
//!
//! This file uses nothing from the rest of the crate: the fuzz target includes it as is.

/// What the scanner reports: the flow level changed at a token (a `[`/`{` that opens one, or a
/// `]`/`}` that closes one), or a block collection opened one indentation deeper; and how deep
/// both kinds are there.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Nesting {
    /// Whether a block collection opened (else the flow level changed).
    pub(crate) block: bool,
    /// Byte offset of the token in the text.
    pub(crate) offset: usize,
    /// Line of the token, counted from 0.
    pub(crate) line: usize,
    /// Column of the token in characters, counted from 0.
    pub(crate) column: usize,
    /// The flow level after the token.
    pub(crate) level: usize,
    /// Block collections open at the token, each indented deeper than the one around it (each
    /// is one more level of nesting; a list at its map key's indentation is not counted).
    pub(crate) blocks: usize,
    /// The document the token is in, counted from 0 as the library counts them.
    pub(crate) document: usize,
}

/// The library's "simple key": a token that may turn out to be a mapping key once a `:` follows
/// on the same line, within 1024 bytes.
#[derive(Clone, Copy, Default)]
struct SimpleKey {
    possible: bool,
    offset: usize,
    line: usize,
    column: usize,
}

/// How far past the start of a simple key its `:` may be (the library's rule).
const SIMPLE_KEY_REACH: usize = 1024;

struct Scanner<'t, F> {
    text: &'t [u8],
    offset: usize,
    line: usize,
    column: usize,
    flow_level: usize,
    /// The indentation of the innermost block collection (-1 outside any).
    indent: i64,
    /// The indentations of the enclosing block collections.
    indents: Vec<i64>,
    /// One per flow level, plus one for the block context.
    simple_keys: Vec<SimpleKey>,
    simple_key_allowed: bool,
    /// The document being scanned, and whether it has content or a `---` began it: the
    /// library starts a new document at a `---` unless the stream began with that `---`.
    document: usize,
    document_begun: bool,
    report: F,
    /// Set when `report` asked to stop.
    stopped: bool,
}

/// Scans `text` and calls `report` at every flow collection start and end and every block
/// collection that opens deeper; stops early when `report` returns `false`.
pub(crate) fn scan(text: &str, report: impl FnMut(Nesting) -> bool) {
    let text = readable_prefix(text);
    let mut scanner = Scanner {
        text: text.as_bytes(),
        offset: 0,
        line: 0,
        column: 0,
        flow_level: 0,
        indent: -1,
        indents: Vec::new(),
        simple_keys: vec![SimpleKey::default()],
        simple_key_allowed: true,
        document: 0,
        document_begun: false,
        report,
        stopped: false,
    };
    // The library's reader drops a leading byte order mark before the scanner sees anything.
    if scanner.text.starts_with(BOM) {
        scanner.offset = BOM.len();
    }
    scanner.run();
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The text up to the first character the library's reader refuses: the library stops there
/// (or before), so nothing after it is ever scanned.
fn readable_prefix(text: &str) -> &str {
    let end = text
        .char_indices()
        .find(|&(_, c)| !readable(c))
        .map_or(text.len(), |(at, _)| at);
    &text[..end]
}

fn readable(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{7E}' | '\u{85}')
        || ('\u{A0}'..='\u{D7FF}').contains(&c)
        || ('\u{E000}'..='\u{FFFD}').contains(&c)
        || c >= '\u{10000}'
}

impl<'t, F: FnMut(Nesting) -> bool> Scanner<'t, F> {
    fn at(&self, ahead: usize) -> u8 {
        self.text.get(self.offset + ahead).copied().unwrap_or(0)
    }

    fn is(&self, byte: u8) -> bool {
        self.at(0) == byte
    }

    fn is_end_at(&self, ahead: usize) -> bool {
        self.offset + ahead >= self.text.len()
    }

    fn is_blank_at(&self, ahead: usize) -> bool {
        matches!(self.at(ahead), b' ' | b'\t')
    }

    /// Line feed, carriage return, NEL, line and paragraph separators: the library's breaks.
    fn break_width_at(&self, ahead: usize) -> usize {
        match (self.at(ahead), self.at(ahead + 1), self.at(ahead + 2)) {
            (b'\r', b'\n', _) => 2,
            (b'\r' | b'\n', _, _) => 1,
            (0xC2, 0x85, _) => 2,
            (0xE2, 0x80, 0xA8 | 0xA9) => 3,
            _ => 0,
        }
    }

    fn is_break_at(&self, ahead: usize) -> bool {
        self.break_width_at(ahead) > 0
    }

    fn is_breakz_at(&self, ahead: usize) -> bool {
        self.is_break_at(ahead) || self.is_end_at(ahead)
    }

    fn is_blankz_at(&self, ahead: usize) -> bool {
        self.is_blank_at(ahead) || self.is_breakz_at(ahead)
    }

    /// The library's "alpha": ASCII letters and digits, `_` and `-` (anchor and tag names).
    fn is_alpha(&self) -> bool {
        matches!(self.at(0), b'0'..=b'9' | b'A'..=b'Z' | b'a'..=b'z' | b'_' | b'-')
    }

    fn is_document_marker(&self) -> bool {
        self.column == 0
            && ((self.at(0) == b'-' && self.at(1) == b'-' && self.at(2) == b'-')
                || (self.at(0) == b'.' && self.at(1) == b'.' && self.at(2) == b'.'))
            && self.is_blankz_at(3)
    }

    /// Moves over one character (not a line break).
    fn skip(&mut self) {
        // The text is UTF-8 and the scan moves by whole characters: the first byte says how
        // long the character is.
        let width = match self.at(0) {
            0xF0..=0xFF => 4,
            0xE0..=0xEF => 3,
            0xC0..=0xDF => 2,
            _ => 1,
        };
        self.offset = (self.offset + width).min(self.text.len());
        self.column += 1;
    }

    /// Moves over one line break.
    fn skip_line(&mut self) {
        let width = self.break_width_at(0);
        if width > 0 {
            self.offset += width;
            self.line += 1;
            self.column = 0;
        }
    }

    fn skip_to_break(&mut self) {
        while !self.is_breakz_at(0) {
            self.skip();
        }
    }

    fn run(&mut self) {
        loop {
            self.skip_to_token();
            self.unroll_indent(self.column as i64);
            if self.is_end_at(0) || self.stopped {
                return;
            }
            self.token();
            if self.stopped {
                return;
            }
        }
    }

    /// Scans one token.
    fn token(&mut self) {
        let c = self.at(0);
        let flow = self.flow_level > 0;
        if self.column == 0 && c == b'%' {
            // A directive takes the rest of its line and the line break (or is an error, and
            // the library stops); a simple key is not allowed right after it.
            self.unroll_indent(-1);
            self.remove_simple_key();
            self.simple_key_allowed = false;
            self.skip_to_break();
            self.skip_line();
            return;
        }
        if self.is_document_marker() {
            if c == b'-' {
                if self.document_begun {
                    self.document += 1;
                }
                self.document_begun = true;
            }
            self.unroll_indent(-1);
            self.remove_simple_key();
            self.simple_key_allowed = false;
            for _ in 0..3 {
                self.skip();
            }
            return;
        }
        self.document_begun = true;
        match c {
            b'[' | b'{' => {
                self.save_simple_key();
                self.flow_level += 1;
                self.simple_keys.push(SimpleKey::default());
                self.simple_key_allowed = true;
                self.report(false);
                self.skip();
            }
            b']' | b'}' => {
                self.remove_simple_key();
                if self.flow_level > 0 {
                    self.flow_level -= 1;
                    self.simple_keys.pop();
                }
                self.simple_key_allowed = false;
                self.report(false);
                self.skip();
            }
            b',' => {
                self.remove_simple_key();
                self.simple_key_allowed = true;
                self.skip();
            }
            b'-' if self.is_blankz_at(1) => {
                self.roll_indent(self.column as i64, self.here());
                self.remove_simple_key();
                self.simple_key_allowed = true;
                self.skip();
            }
            b'?' if flow || self.is_blankz_at(1) => {
                self.roll_indent(self.column as i64, self.here());
                self.remove_simple_key();
                self.simple_key_allowed = !flow;
                self.skip();
            }
            b':' if flow || self.is_blankz_at(1) => {
                self.value();
                self.skip();
            }
            b'*' | b'&' => {
                self.save_simple_key();
                self.simple_key_allowed = false;
                self.skip();
                while self.is_alpha() {
                    self.skip();
                }
            }
            b'!' => {
                self.save_simple_key();
                self.simple_key_allowed = false;
                self.tag();
            }
            b'|' | b'>' if !flow => {
                self.remove_simple_key();
                self.simple_key_allowed = true;
                self.block_scalar();
            }
            b'\'' | b'"' => {
                self.save_simple_key();
                self.simple_key_allowed = false;
                self.quoted_scalar(c == b'\'');
            }
            _ if self.starts_plain_scalar() => {
                self.save_simple_key();
                self.simple_key_allowed = false;
                self.plain_scalar();
            }
            _ => {
                // No token starts here: the library stops with an error. Going on cannot
                // report less nesting than the library sees.
                self.skip();
            }
        }
    }

    fn report(&mut self, block: bool) {
        let change = Nesting {
            block,
            offset: self.offset,
            line: self.line,
            column: self.column,
            level: self.flow_level,
            blocks: self.indents.len(),
            document: self.document,
        };
        if !(self.report)(change) {
            self.stopped = true;
        }
    }

    fn starts_plain_scalar(&self) -> bool {
        let c = self.at(0);
        let indicator = self.is_blankz_at(0) || b"-?:,[]{}#&*!|>'\"%@`".contains(&c);
        !indicator
            || (c == b'-' && !self.is_blank_at(1))
            || (self.flow_level == 0 && matches!(c, b'?' | b':') && !self.is_blankz_at(1))
    }

    /// Whitespace, comments and line breaks up to the next token.
    fn skip_to_token(&mut self) {
        loop {
            if self.column == 0 && self.text[self.offset..].starts_with(BOM) {
                self.skip();
            }
            while self.is(b' ')
                || ((self.flow_level > 0 || !self.simple_key_allowed) && self.is(b'\t'))
            {
                self.skip();
            }
            if self.is(b'#') {
                self.skip_to_break();
            }
            if !self.is_break_at(0) {
                return;
            }
            self.skip_line();
            if self.flow_level == 0 {
                self.simple_key_allowed = true;
            }
        }
    }

    /// A block collection at `column` (if deeper than the current one); `at` is where its
    /// first token is, for the report.
    fn roll_indent(&mut self, column: i64, at: (usize, usize, usize)) {
        if self.flow_level == 0 && self.indent < column {
            self.indents.push(self.indent);
            self.indent = column;
            let here = (self.offset, self.line, self.column);
            (self.offset, self.line, self.column) = at;
            self.report(true);
            (self.offset, self.line, self.column) = here;
        }
    }

    fn here(&self) -> (usize, usize, usize) {
        (self.offset, self.line, self.column)
    }

    fn unroll_indent(&mut self, column: i64) {
        if self.flow_level > 0 {
            return;
        }
        while self.indent > column {
            self.indent = self.indents.pop().unwrap_or(-1);
        }
    }

    fn top_key(&mut self) -> &mut SimpleKey {
        // The stack holds one key per flow level plus the block one, so it is never empty.
        let last = self.simple_keys.len() - 1;
        &mut self.simple_keys[last]
    }

    fn save_simple_key(&mut self) {
        if self.simple_key_allowed {
            let key = SimpleKey {
                possible: true,
                offset: self.offset,
                line: self.line,
                column: self.column,
            };
            *self.top_key() = key;
        }
    }

    fn remove_simple_key(&mut self) {
        self.top_key().possible = false;
    }

    /// A `:`: the value of the pending simple key (which opens a block mapping at the key's
    /// column), or of an explicit or empty key.
    fn value(&mut self) {
        let (offset, line) = (self.offset, self.line);
        let key = *self.top_key();
        // Stale: the library forgets a key once the scan left its line or went 1024 bytes on.
        let possible = key.possible && key.line == line && offset <= key.offset + SIMPLE_KEY_REACH;
        if possible {
            self.roll_indent(key.column as i64, (key.offset, key.line, key.column));
            self.top_key().possible = false;
            self.simple_key_allowed = false;
        } else {
            self.roll_indent(self.column as i64, self.here());
            self.simple_key_allowed = self.flow_level == 0;
        }
    }

    /// `!tag`, `!!tag`, `!handle!suffix` or `!<verbatim>`.
    fn tag(&mut self) {
        if self.at(1) == b'<' {
            self.skip();
            self.skip();
            self.tag_uri(true);
            if self.is(b'>') {
                self.skip();
            }
            return;
        }
        self.skip();
        while self.is_alpha() {
            self.skip();
        }
        if self.is(b'!') {
            self.skip();
        }
        self.tag_uri(false);
    }

    fn tag_uri(&mut self, verbatim: bool) {
        loop {
            let c = self.at(0);
            let uri = self.is_alpha()
                || b";/?:@&=+$.%!~*'()".contains(&c)
                || (verbatim && b",[]".contains(&c));
            if !uri || self.is_end_at(0) {
                return;
            }
            // A `%` escape is three characters; a malformed one stops the library.
            self.skip();
        }
    }

    /// `|` or `>`, its indicators, then every line indented at least as much as the content.
    fn block_scalar(&mut self) {
        self.skip();
        let mut increment = 0;
        if matches!(self.at(0), b'+' | b'-') {
            self.skip();
            if self.at(0).is_ascii_digit() {
                increment = i64::from(self.at(0) - b'0');
                self.skip();
            }
        } else if self.at(0).is_ascii_digit() {
            increment = i64::from(self.at(0) - b'0');
            self.skip();
            if matches!(self.at(0), b'+' | b'-') {
                self.skip();
            }
        }
        while self.is_blank_at(0) {
            self.skip();
        }
        if self.is(b'#') {
            self.skip_to_break();
        }
        // Anything else before the line break is an error that stops the library.
        self.skip_line();
        let mut indent = 0;
        if increment > 0 {
            indent = if self.indent >= 0 {
                self.indent + increment
            } else {
                increment
            };
        }
        self.block_scalar_breaks(&mut indent);
        while self.column as i64 == indent && !self.is_end_at(0) {
            self.skip_to_break();
            self.skip_line();
            self.block_scalar_breaks(&mut indent);
        }
    }

    /// The empty lines and indentation before a block scalar line; settles the content
    /// indentation on the first line that has text.
    fn block_scalar_breaks(&mut self, indent: &mut i64) {
        let mut max_indent = 0;
        loop {
            while (*indent == 0 || (self.column as i64) < *indent) && self.is(b' ') {
                self.skip();
            }
            max_indent = max_indent.max(self.column as i64);
            if !self.is_break_at(0) {
                break;
            }
            self.skip_line();
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent + 1).max(1);
        }
    }

    /// `'…'` (a quote doubled inside) or `"…"` (backslash escapes, also of line breaks).
    fn quoted_scalar(&mut self, single: bool) {
        let quote = if single { b'\'' } else { b'"' };
        self.skip();
        loop {
            if self.is_document_marker() || self.is_end_at(0) {
                // An error that stops the library.
                return;
            }
            while !self.is_blankz_at(0) {
                let c = self.at(0);
                if single && c == b'\'' && self.at(1) == b'\'' {
                    self.skip();
                    self.skip();
                } else if c == quote {
                    break;
                } else if !single && c == b'\\' && self.is_break_at(1) {
                    self.skip();
                    self.skip_line();
                    break;
                } else if !single && c == b'\\' {
                    let digits = match self.at(1) {
                        b'x' => 2,
                        b'u' => 4,
                        b'U' => 8,
                        _ => 0,
                    };
                    self.skip();
                    self.skip();
                    for _ in 0..digits {
                        if !self.at(0).is_ascii_hexdigit() {
                            break;
                        }
                        self.skip();
                    }
                } else {
                    self.skip();
                }
            }
            if self.is(quote) {
                self.skip();
                return;
            }
            while self.is_blank_at(0) || self.is_break_at(0) {
                if self.is_blank_at(0) {
                    self.skip();
                } else {
                    self.skip_line();
                }
            }
        }
    }

    /// A plain scalar: up to `: `, ` #`, a flow indicator inside a flow collection, a document
    /// marker, or a line indented no deeper than the enclosing block collection.
    fn plain_scalar(&mut self) {
        let indent = self.indent + 1;
        let flow = self.flow_level > 0;
        let mut leading_blanks = false;
        loop {
            if self.is_document_marker() || self.is(b'#') {
                break;
            }
            while !self.is_blankz_at(0) {
                let c = self.at(0);
                if (c == b':' && self.is_blankz_at(1)) || (flow && b",[]{}".contains(&c)) {
                    break;
                }
                leading_blanks = false;
                self.skip();
            }
            if !(self.is_blank_at(0) || self.is_break_at(0)) {
                break;
            }
            while self.is_blank_at(0) || self.is_break_at(0) {
                if self.is_blank_at(0) {
                    self.skip();
                } else {
                    self.skip_line();
                    leading_blanks = true;
                }
            }
            if !flow && (self.column as i64) < indent {
                break;
            }
        }
        if leading_blanks {
            self.simple_key_allowed = true;
        }
    }
}
