//! What a plugin says: the `log` import and its stdout/stderr, both into the host's log,
//! tagged with tenant and source (connector or connector/task) and rate-limited per
//! instance (`sandbox.log.lines.per.second`, with a burst of as many again): excess
//! lines are dropped and counted, and the count is logged when lines flow again.
//!
//! The last lines a plugin wrote to stderr during its current call are also kept (rate
//! limit or not), so that when the call traps, its trace can lead with the plugin's own
//! words: a Python traceback, a JavaScript exception, a Rust panic message.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

use super::bindings::v0_1::sluice::connector::log::Level;
use super::rate::TokenBucket;

struct Bucket {
    rate: TokenBucket,
    dropped: u64,
    /// When dropped lines were last reported: at most once a second, so the report of a
    /// flood is not a flood itself.
    reported: Option<std::time::Instant>,
}

/// How often dropped lines are reported while a plugin keeps logging over its rate.
const DROPPED_REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

fn enabled(level: Level) -> bool {
    match level {
        Level::Trace => tracing::enabled!(target: "plugin", tracing::Level::TRACE),
        Level::Debug => tracing::enabled!(target: "plugin", tracing::Level::DEBUG),
        Level::Info => tracing::enabled!(target: "plugin", tracing::Level::INFO),
        Level::Warn => tracing::enabled!(target: "plugin", tracing::Level::WARN),
        Level::Error => tracing::enabled!(target: "plugin", tracing::Level::ERROR),
    }
}

/// `text` with its control characters escaped (`\n`, `\u{1b}`, ...), so that what a plugin
/// says (a log line, an error message, a file name in it) can never forge a line of the
/// host's log or of a status.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    escape_controls_but(text, &[])
}

/// Control characters, and those that break or reorder a line where a terminal or viewer
/// shows it (the line and paragraph separators, the bidirectional marks, embeddings,
/// overrides and isolates: `\u{202E}gnp.exe` shows as `exe.png`).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// The same, keeping the characters in `keep` (a host-made multi-line trace keeps `\n`).
pub fn escape_controls_but<'a>(text: &'a str, keep: &[char]) -> Cow<'a, str> {
    if !text.chars().any(|c| needs_escape(c) && !keep.contains(&c)) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs_escape(c) && !keep.contains(&c) {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

/// One instance's log output.
#[derive(Clone)]
pub struct PluginLog {
    tenant: Arc<str>,
    source: Arc<str>,
    bucket: Arc<Mutex<Bucket>>,
    stderr_tail: Arc<Mutex<StderrTail>>,
}

/// The last stderr lines of the current call, escaped, at most this many lines and bytes.
#[derive(Default)]
struct StderrTail {
    lines: VecDeque<String>,
    bytes: usize,
}

const TAIL_LINES: usize = 40;
const TAIL_BYTES: usize = 8 << 10;
const TAIL_LINE_BYTES: usize = TAIL_BYTES / 4;

impl PluginLog {
    pub fn new(tenant: &str, source: &str, lines_per_second: u32) -> PluginLog {
        let per_second = f64::from(lines_per_second.max(1));
        PluginLog {
            tenant: tenant.into(),
            source: source.into(),
            bucket: Arc::new(Mutex::new(Bucket {
                rate: TokenBucket::new(per_second, 2.0 * per_second),
                dropped: 0,
                reported: None,
            })),
            stderr_tail: Arc::default(),
        }
    }

    /// Forgets the stderr lines of the previous call (a call is starting).
    pub fn clear_stderr_tail(&self) {
        *self.stderr_tail.lock().unwrap() = StderrTail::default();
    }

    /// What the plugin wrote to stderr during this call, for a trace: its first line as
    /// is, the others indented, so no line of it can pass for a line of the host's log.
    pub fn take_stderr_tail(&self) -> Option<String> {
        let tail = std::mem::take(&mut *self.stderr_tail.lock().unwrap());
        let mut lines: Vec<String> = tail.lines.into();
        while lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        let first = lines.iter().position(|l| !l.trim().is_empty())?;
        let mut text = lines[first].clone();
        for line in &lines[first + 1..] {
            text.push_str("\n  ");
            text.push_str(line);
        }
        Some(text)
    }

    fn remember_stderr(&self, line: &str) {
        let mut line = escape_controls(line).into_owned();
        // A line may take a quarter of the tail: an exception's long message (Python and
        // JavaScript print it on one line) keeps its start, and the lines after it (the
        // binding's panic) no longer push it out whole.
        if line.len() > TAIL_LINE_BYTES {
            super::sandbox::cut_at_char_boundary(&mut line, TAIL_LINE_BYTES);
            line.push_str(" …");
        }
        let mut tail = self.stderr_tail.lock().unwrap();
        tail.bytes += line.len();
        tail.lines.push_back(line);
        while tail.lines.len() > TAIL_LINES || tail.bytes > TAIL_BYTES {
            let Some(dropped) = tail.lines.pop_front() else { break };
            tail.bytes -= dropped.len();
        }
    }

    /// Lines dropped by the rate limit since they were last reported.
    pub fn dropped(&self) -> u64 {
        self.bucket.lock().unwrap().dropped
    }

    pub fn emit(&self, level: Level, message: &str) {
        // A line nobody will see (debug lines at the default level) costs no share of the
        // rate: a plugin's per-file debug lines must not drop its info lines.
        if enabled(level) {
            self.emit_shown(level, message);
        }
    }

    /// [`PluginLog::emit`] of a line the host's log level shows.
    fn emit_shown(&self, level: Level, message: &str) {
        // A log line is at most MAX_LINE bytes, whatever the plugin sends.
        let message = match message.char_indices().nth(MAX_LINE) {
            Some((cut, _)) => &message[..cut],
            None => message,
        };
        let message = escape_controls(message);
        let resumed_after = {
            let mut bucket = self.bucket.lock().unwrap();
            if !bucket.rate.try_take_one() {
                bucket.dropped += 1;
                return;
            }
            let due = bucket.reported.is_none_or(|at| at.elapsed() >= DROPPED_REPORT_EVERY);
            if bucket.dropped > 0 && due {
                bucket.reported = Some(std::time::Instant::now());
                std::mem::take(&mut bucket.dropped)
            } else {
                0
            }
        };
        let (tenant, source) = (&*self.tenant, &*self.source);
        if resumed_after > 0 {
            tracing::warn!(target: "plugin", tenant, source, "dropped {resumed_after} log lines over sandbox.log.lines.per.second");
        }
        match level {
            Level::Trace => tracing::trace!(target: "plugin", tenant, source, "{message}"),
            Level::Debug => tracing::debug!(target: "plugin", tenant, source, "{message}"),
            Level::Info => tracing::info!(target: "plugin", tenant, source, "{message}"),
            Level::Warn => tracing::warn!(target: "plugin", tenant, source, "{message}"),
            Level::Error => tracing::error!(target: "plugin", tenant, source, "{message}"),
        }
    }

    /// A WASI stdout whose lines go to this log.
    pub fn stdout(&self) -> PluginOutput {
        PluginOutput { log: self.clone(), level: Level::Info, is_stderr: false }
    }

    /// A WASI stderr whose lines go to this log, and to the call's stderr tail.
    pub fn stderr(&self) -> PluginOutput {
        PluginOutput { log: self.clone(), level: Level::Warn, is_stderr: true }
    }
}

/// A plugin's stdout or stderr.
pub struct PluginOutput {
    log: PluginLog,
    level: Level,
    is_stderr: bool,
}

impl IsTerminal for PluginOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for PluginOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(LineWriter { log: self.log.clone(), level: self.level, is_stderr: self.is_stderr, line: Vec::new() })
    }
}

/// Longest line kept from stdout/stderr; the rest of a longer one is cut.
const MAX_LINE: usize = 16 << 10;

struct LineWriter {
    log: PluginLog,
    level: Level,
    is_stderr: bool,
    line: Vec<u8>,
}

impl LineWriter {
    fn write_bytes(&mut self, mut bytes: &[u8]) {
        while let Some(end) = bytes.iter().position(|&b| b == b'\n') {
            self.push(&bytes[..end]);
            self.flush_line();
            bytes = &bytes[end + 1..];
        }
        self.push(bytes);
    }

    fn push(&mut self, bytes: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.line.len());
        self.line.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn flush_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        let line = String::from_utf8_lossy(&line);
        if self.is_stderr {
            self.log.remember_stderr(&line);
        }
        self.log.emit(self.level, &line);
    }
}

impl tokio::io::AsyncWrite for LineWriter {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.get_mut().write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.line.is_empty() {
            this.flush_line();
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Not through a scoped tracing subscriber: tracing caches whether a call site is
    /// enabled globally, so another test's logging on another thread could turn this
    /// test's lines off midway (it once saw none dropped).
    #[test]
    fn excess_lines_are_dropped_and_counted() {
        let log = PluginLog::new("t", "c", 10);
        for _ in 0..1000 {
            log.emit_shown(Level::Info, "x");
        }
        // A burst of 2 × 10 passes (plus what refilled meanwhile); the rest is dropped.
        let dropped = log.dropped();
        assert!((970..=980).contains(&dropped), "{dropped}");
        // Lines no subscriber shows (unit tests install none) use none of the rate.
        assert!(!enabled(Level::Error), "a unit test installed a tracing subscriber");
        for _ in 0..1000 {
            log.emit(Level::Info, "x");
        }
        assert_eq!(log.dropped(), dropped);
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_controls("plain"), "plain");
        assert_eq!(escape_controls("a\nINFO forged\r\u{1b}[31m"), "a\\nINFO forged\\r\\u{1b}[31m");
        assert_eq!(escape_controls_but("frame 1\nframe\t2", &['\n']), "frame 1\nframe\\t2");
        // Characters that break a line or reorder it where a viewer shows it.
        assert_eq!(escape_controls("a\u{2028}b\u{202E}c\u{2066}"), "a\\u{2028}b\\u{202e}c\\u{2066}");
    }

    #[test]
    fn output_is_split_into_lines_and_long_lines_are_cut() {
        let log = PluginLog::new("t", "c", 1000);
        let mut writer = LineWriter { log: log.clone(), level: Level::Info, is_stderr: false, line: Vec::new() };
        writer.write_bytes(b"one\ntw");
        assert_eq!(writer.line, b"tw");
        writer.write_bytes(&vec![b'x'; MAX_LINE * 2]);
        assert_eq!(writer.line.len(), MAX_LINE);
    }

    #[test]
    fn a_calls_stderr_is_kept_for_its_trace_and_cannot_forge_log_lines() {
        let log = PluginLog::new("t", "c", 1);
        let mut stderr = LineWriter { log: log.clone(), level: Level::Warn, is_stderr: true, line: Vec::new() };
        stderr.write_bytes(b"from an earlier call\n");
        log.clear_stderr_tail();
        stderr.write_bytes(b"\nTraceback (most recent call last):\n  File \"app.py\"\nERROR sluice: forged\x1b[0m\n\n");
        assert_eq!(
            log.take_stderr_tail().unwrap(),
            "Traceback (most recent call last):\n    File \"app.py\"\n  ERROR sluice: forged\\u{1b}[0m"
        );
        assert_eq!(log.take_stderr_tail(), None, "taken once");
        for n in 0..100 {
            stderr.write_bytes(format!("line {n}\n").as_bytes());
        }
        let tail = log.take_stderr_tail().unwrap();
        assert!(tail.starts_with("line 60\n") && tail.ends_with("line 99"), "the last {TAIL_LINES} lines: {tail}");
        // An exception with a long message, then the lines after it.
        let message = format!("ValueError: {}\n", "y".repeat(8100));
        stderr.write_bytes(b"Traceback (most recent call last):\n");
        stderr.write_bytes(message.as_bytes());
        stderr.write_bytes(b"thread '<unnamed>' panicked at runtime/src/lib.rs:1293:29\n");
        let tail = log.take_stderr_tail().unwrap();
        assert!(tail.starts_with("Traceback (most recent call last):\n  ValueError: yyy"), "{tail}");
        assert!(tail.contains("y …\n  thread '<unnamed>' panicked"), "{tail}");
        assert!(tail.len() <= TAIL_BYTES + 64, "{}", tail.len());
    }
}
