//! Reading one file from a position: lines (without `\n` or `\r\n`) or the whole file,
//! `.gz` decompressed. Memory stays bounded by the buffer and the longest line allowed,
//! which is what one record may hold: a longer line is an error ([`TooLong`]) that fails
//! its file, not the task, or (`errors.tolerance=all`) is skipped
//! ([`LineReader::skip_long_line`]) without ever being held in memory.

use std::cell::RefCell;
use std::io::{self, BufRead, BufReader, Read};
use std::rc::Rc;

use crate::offset::HEAD_BYTES;

/// Read buffer per open file.
const BUFFER: usize = 32 << 10;

/// A line or file larger than a record may be.
#[derive(Debug)]
pub struct TooLong {
    pub limit: usize,
}

impl std::fmt::Display for TooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "longer than the {} bytes one record may hold (sandbox.record.max.bytes)", self.limit)
    }
}

impl std::error::Error for TooLong {}

/// Whether `error` is a [`TooLong`].
pub fn is_too_long(error: &io::Error) -> bool {
    error.get_ref().is_some_and(|e| e.is::<TooLong>())
}

/// A gzip stream read as `gzip -d` reads one: bytes after its last member that are no
/// gzip member (zeros a tape or a block device padded it with, or other trailing bytes,
/// which `gzip -d` reports as "trailing garbage ignored") end the stream, where flate2
/// fails it ("invalid gzip header") and the file, every line of which was read, failed.
/// A first header that is not gzip's still fails: the file is not gzip at all.
struct TrailingBytesIgnored<R> {
    inner: R,
    /// Decompressed bytes so far: none, and the bad header is the file's first.
    produced: u64,
}

impl<R: Read> Read for TrailingBytesIgnored<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(read) => {
                self.produced += read as u64;
                Ok(read)
            }
            Err(e)
                if self.produced > 0
                    && e.kind() == io::ErrorKind::InvalidInput
                    && e.to_string() == "invalid gzip header" =>
            {
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }
}

/// Why a whole `.gz` stream could not be read up to the committed position.
pub const SHORTER_THAN_OFFSET: &str = "file is shorter than its committed offset";

/// A stream that keeps its first [`HEAD_BYTES`] bytes in `head` as they pass.
struct HeadRecorder<R> {
    inner: R,
    head: Rc<RefCell<Vec<u8>>>,
    /// Bytes read so far.
    at: u64,
}

impl<R: Read> Read for HeadRecorder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf)?;
        let mut head = self.head.borrow_mut();
        if self.at == head.len() as u64 && head.len() < HEAD_BYTES {
            let take = read.min(HEAD_BYTES - head.len());
            head.extend_from_slice(&buf[..take]);
        }
        self.at += read as u64;
        Ok(read)
    }
}

pub struct LineReader {
    source: BufReader<Box<dyn Read>>,
    /// Bytes consumed, counting only complete lines (and a final line without newline).
    pub position: u64,
    /// A line whose newline has not been written yet (tail mode holds it back).
    pending: Vec<u8>,
    /// The line [`LineReader::next_line`] handed out last (its buffer is reused).
    line: Vec<u8>,
    max_line: usize,
    /// The line found too long last: how many of its bytes were consumed, and whether
    /// its newline was among them.
    long: Option<(u64, bool)>,
    /// Skipping a too-long line: its bytes consumed so far (its newline not yet seen).
    skipping: Option<u64>,
    /// NUL bytes read where a line starts, before any other byte of it: no part of it. A
    /// hole left by `copytruncate` under a writer that does not append (`app > app.log`
    /// writes on at its old offset, after a run of zeros as long as the log was), or the
    /// zeros of a file sized before it was filled, where the lines are still to come.
    zeros: u64,
}

impl LineReader {
    /// Reads lines from `source`, which starts at byte `position` of the (decompressed)
    /// file; lines longer than `max_line` are [`TooLong`].
    pub fn new(source: Box<dyn Read>, position: u64, max_line: usize) -> LineReader {
        LineReader {
            source: BufReader::with_capacity(BUFFER, source),
            position,
            pending: Vec::new(),
            line: Vec::new(),
            max_line,
            long: None,
            skipping: None,
            zeros: 0,
        }
    }

    /// Lines of a gzip stream read from its start, skipping to decompressed `position`.
    /// The stream's first [`HEAD_BYTES`] decompressed bytes go to `head` as they are read
    /// (those skipped too), so a `.gz` replaced under its name can be told from the one
    /// read before, as a plain file is by its first bytes.
    pub fn gzip(
        compressed: Box<dyn Read>,
        position: u64,
        max_line: usize,
        head: Rc<RefCell<Vec<u8>>>,
    ) -> io::Result<LineReader> {
        let decoder = TrailingBytesIgnored { inner: flate2::read::MultiGzDecoder::new(compressed), produced: 0 };
        let mut decoder = HeadRecorder { inner: decoder, head, at: 0 };
        let skipped = io::copy(&mut (&mut decoder).take(position), &mut io::sink())?;
        if skipped < position {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, SHORTER_THAN_OFFSET));
        }
        Ok(LineReader::new(Box::new(decoder), position, max_line))
    }

    /// Bytes of an unfinished last line held back (tail mode), zeros where a line would
    /// start, or of a too-long line being skipped. In u64: a run of zeros held (a file
    /// sized gigabytes before it is filled) may pass what a 32-bit `usize` holds.
    pub fn pending_len(&self) -> u64 {
        self.zeros + self.pending.len() as u64 + self.skipping.unwrap_or(0)
    }

    /// After [`TooLong`]: reads on past that line instead of failing the file. True when
    /// its end was already read; else [`LineReader::skip_rest`] reads on to its newline
    /// (which in tail mode may not be written yet). [`LineReader::position`] moves past
    /// it once its end is read.
    pub fn skip_long_line(&mut self) -> bool {
        match self.long.take() {
            Some((consumed, true)) => {
                self.position += consumed;
                true
            }
            Some((consumed, false)) => {
                self.skipping = Some(consumed);
                false
            }
            None => false,
        }
    }

    /// Whether a too-long line is being skipped: [`LineReader::skip_rest`] comes before
    /// the next line.
    pub fn is_skipping(&self) -> bool {
        self.skipping.is_some()
    }

    /// Reads on through the line being skipped: true once past its end (the end of the
    /// file counts, unless `hold_partial`), false when there is nothing more now.
    pub fn skip_rest(&mut self, hold_partial: bool) -> io::Result<bool> {
        while let Some(consumed) = self.skipping {
            let available = self.source.fill_buf()?;
            if available.is_empty() {
                if hold_partial {
                    return Ok(false);
                }
                // The file ends inside it: it was the last line.
                self.position += consumed;
                self.skipping = None;
                return Ok(true);
            }
            match memchr::memchr(b'\n', available) {
                Some(end) => {
                    self.source.consume(end + 1);
                    self.position += consumed + end as u64 + 1;
                    self.skipping = None;
                    return Ok(true);
                }
                None => {
                    let taken = available.len();
                    self.source.consume(taken);
                    self.skipping = Some(consumed + taken as u64);
                }
            }
        }
        Ok(true)
    }

    fn too_long(&mut self, consumed_newline: bool) -> io::Error {
        let consumed = std::mem::take(&mut self.zeros) + self.pending.len() as u64 + u64::from(consumed_newline);
        self.long = Some((consumed, consumed_newline));
        self.pending.clear();
        io::Error::new(io::ErrorKind::InvalidData, TooLong { limit: self.max_line })
    }

    /// The next line, or `None` at the end of what is there now. With `hold_partial`, a
    /// last line without its newline is kept back until the newline arrives (tail mode);
    /// otherwise it is returned as the file's last line, with the position after it. The
    /// line lives in the reader's buffer until the next call: reading lines allocates
    /// nothing once warm.
    pub fn next_line(&mut self, hold_partial: bool) -> io::Result<Option<(&[u8], u64)>> {
        self.long = None;
        if self.skipping.is_some() && !self.skip_rest(hold_partial)? {
            return Ok(None);
        }
        loop {
            let available = self.source.fill_buf()?;
            if available.is_empty() {
                if self.pending.is_empty() || hold_partial {
                    return Ok(None);
                }
                // A last line ending in `\r` (a CRLF file cut after it) ends as its lines
                // do, without it, and has their limit.
                let content = self.pending.len() - usize::from(self.pending.last() == Some(&b'\r'));
                if content > self.max_line {
                    return Err(self.too_long(false));
                }
                self.position += std::mem::take(&mut self.zeros) + self.pending.len() as u64;
                self.pending.truncate(content);
                return Ok(Some(self.hand_out()));
            }
            if self.pending.is_empty() {
                let zeros = available.iter().take_while(|&&byte| byte == 0).count();
                if zeros > 0 {
                    self.source.consume(zeros);
                    self.zeros += zeros as u64;
                    continue;
                }
            }
            // memchr scans a word at a time (16 bytes with `simd128`), not byte by byte.
            let (taken, complete) = match memchr::memchr(b'\n', available) {
                Some(end) => (end, true),
                None => (available.len(), false),
            };
            if self.pending.len() + taken > self.max_line + 1 {
                return Err(self.too_long(false));
            }
            self.pending.extend_from_slice(&available[..taken]);
            self.source.consume(taken + usize::from(complete));
            if complete {
                let content = self.pending.len() - usize::from(self.pending.last() == Some(&b'\r'));
                if content > self.max_line {
                    return Err(self.too_long(true));
                }
                self.position += std::mem::take(&mut self.zeros) + self.pending.len() as u64 + 1;
                self.pending.truncate(content);
                return Ok(Some(self.hand_out()));
            }
            if self.pending.len() > self.max_line + 1 {
                return Err(self.too_long(false));
            }
        }
    }

    /// The pending line becomes the handed-out one; the pending buffer starts empty with
    /// the old line's room.
    fn hand_out(&mut self) -> (&[u8], u64) {
        std::mem::swap(&mut self.line, &mut self.pending);
        self.pending.clear();
        (&self.line, self.position)
    }
}

/// The whole content of `source` (decompressed when `gzip`), refused above `max` bytes.
pub fn read_whole(source: Box<dyn Read>, gzip: bool, max: u64, why: &str) -> io::Result<Vec<u8>> {
    let source: Box<dyn Read> = if gzip {
        Box::new(TrailingBytesIgnored { inner: flate2::read::MultiGzDecoder::new(source), produced: 0 })
    } else {
        source
    };
    let mut content = Vec::new();
    source.take(max + 1).read_to_end(&mut content)?;
    if content.len() as u64 > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("file is larger than {why} ({max} bytes)")));
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines(text: &[u8], from: u64, hold: bool, max: usize) -> io::Result<(Vec<String>, u64)> {
        let mut reader = LineReader::new(Box::new(io::Cursor::new(text[from as usize..].to_vec())), from, max);
        let mut out = Vec::new();
        while let Some((line, _)) = reader.next_line(hold)? {
            out.push(String::from_utf8(line.to_vec()).unwrap());
        }
        Ok((out, reader.position))
    }

    #[test]
    fn lines_crlf_no_trailing_newline_and_resume() {
        let text = b"one\r\ntwo\nthree";
        assert_eq!(lines(text, 0, false, 100).unwrap(), (vec!["one".into(), "two".into(), "three".into()], 14));
        assert_eq!(lines(text, 5, false, 100).unwrap(), (vec!["two".into(), "three".into()], 14));
        // Tail mode holds the unfinished last line back.
        assert_eq!(lines(text, 0, true, 100).unwrap(), (vec!["one".into(), "two".into()], 9));
        // A last line cut after its `\r` ends without it, as the CRLF lines before it.
        assert_eq!(lines(b"x\r\ny\r", 0, false, 100).unwrap(), (vec!["x".into(), "y".into()], 5));
    }

    #[test]
    fn a_line_longer_than_a_record_is_too_long_and_nothing_after_it_is_read() {
        let text = format!("ok\n{}\nafter\n", "x".repeat(50));
        let mut reader = LineReader::new(Box::new(io::Cursor::new(text.into_bytes())), 0, 10);
        assert_eq!(reader.next_line(false).unwrap().unwrap(), (b"ok".as_slice(), 3));
        let error = reader.next_line(false).unwrap_err();
        assert!(is_too_long(&error), "{error}");
        assert_eq!(reader.position, 3, "the position stays before the long line");
        // Exactly at the limit is fine, CRLF included.
        assert_eq!(lines(b"0123456789\r\n", 0, false, 10).unwrap().0, ["0123456789"]);
        assert!(lines(b"0123456789a\n", 0, false, 10).is_err());
        // A last line without newline has the same limit, and is skipped to the end.
        assert_eq!(lines(b"ok\n0123456789", 0, false, 10).unwrap().0, ["ok", "0123456789"]);
        // Its `\r` is dropped as a CRLF line's is, so a last line at the limit with one fits.
        assert_eq!(lines(b"ok\n0123456789\r", 0, false, 10).unwrap(), (vec!["ok".into(), "0123456789".into()], 14));
        assert!(lines(b"ok\n0123456789a\r", 0, false, 10).is_err());
        let mut reader = LineReader::new(Box::new(io::Cursor::new(b"ok\n0123456789a".to_vec())), 0, 10);
        assert_eq!(reader.next_line(false).unwrap().unwrap().0, b"ok");
        assert!(is_too_long(&reader.next_line(false).unwrap_err()));
        assert!(!reader.skip_long_line());
        assert!(reader.skip_rest(false).unwrap());
        assert_eq!(reader.position, 14, "past the skipped last line");
    }

    #[test]
    fn a_long_line_skipped_is_never_held_and_the_position_moves_past_it() {
        let long = "x".repeat(100);
        for (text, hold, end_read) in [
            (format!("ok\n{long}\nafter\n"), false, false),
            (format!("ok\n{long}\r\nafter\n"), true, false),
            // One byte over, its newline read with it.
            (format!("ok\n{}\nafter\n", "y".repeat(11)), false, true),
        ] {
            let mut reader = LineReader::new(Box::new(io::Cursor::new(text.clone().into_bytes())), 0, 10);
            assert_eq!(reader.next_line(hold).unwrap().unwrap().0, b"ok");
            assert!(is_too_long(&reader.next_line(hold).unwrap_err()));
            assert_eq!(reader.skip_long_line(), end_read, "{text:?}");
            assert!(reader.skip_rest(hold).unwrap());
            let after = text.len() as u64 - 6;
            assert_eq!(reader.position, after, "{text:?}");
            assert_eq!(reader.next_line(hold).unwrap().unwrap(), (b"after".as_slice(), after + 6), "{text:?}");
            assert!(reader.next_line(hold).unwrap().is_none());
        }
        // Tail mode: the long line's end is not written yet; skipping goes on as it comes.
        let shared = std::rc::Rc::new(std::cell::RefCell::new(format!("ok\n{long}").into_bytes()));
        struct Growing(std::rc::Rc<std::cell::RefCell<Vec<u8>>>, usize);
        impl Read for Growing {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let data = self.0.borrow();
                let n = buf.len().min(data.len() - self.1);
                buf[..n].copy_from_slice(&data[self.1..self.1 + n]);
                self.1 += n;
                Ok(n)
            }
        }
        let mut reader = LineReader::new(Box::new(Growing(shared.clone(), 0)), 0, 10);
        assert_eq!(reader.next_line(true).unwrap().unwrap().0, b"ok");
        assert!(is_too_long(&reader.next_line(true).unwrap_err()));
        assert!(!reader.skip_long_line());
        assert!(!reader.skip_rest(true).unwrap());
        assert!(reader.is_skipping());
        assert_eq!(reader.position, 3, "not past it before its end");
        assert_eq!(reader.pending_len(), 100);
        shared.borrow_mut().extend_from_slice(b"xxx\nnext\n");
        assert!(reader.skip_rest(true).unwrap());
        assert_eq!(reader.position, 3 + 104);
        assert_eq!(reader.next_line(true).unwrap().unwrap(), (b"next".as_slice(), 3 + 104 + 5));
        // A file that ends inside the long line (not holding partial lines): past it.
        let mut reader = LineReader::new(Box::new(io::Cursor::new(format!("ok\n{long}").into_bytes())), 0, 10);
        reader.next_line(false).unwrap();
        assert!(reader.next_line(false).is_err());
        assert!(!reader.skip_long_line());
        assert!(reader.skip_rest(false).unwrap());
        assert_eq!(reader.position, 103);
    }

    #[test]
    fn zeros_where_a_line_starts_are_no_part_of_it() {
        // copytruncate under a writer that does not append: a hole, then its next lines,
        // the hole longer than a line may be.
        let mut text = vec![0u8; 50];
        text.extend_from_slice(b"next\n\0\0after\n");
        assert_eq!(lines(&text, 0, false, 10).unwrap(), (vec!["next".into(), "after".into()], 63));
        // Zeros at the end (the rest of a file sized before it was filled) are held, and
        // never a line: the position stays before them.
        let text = b"one\n\0\0\0\0";
        assert_eq!(lines(text, 0, true, 100).unwrap(), (vec!["one".into()], 4));
        assert_eq!(lines(text, 0, false, 100).unwrap(), (vec!["one".into()], 4));
        let mut reader = LineReader::new(Box::new(io::Cursor::new(text.to_vec())), 0, 100);
        reader.next_line(true).unwrap();
        assert_eq!(reader.next_line(true).unwrap(), None);
        assert_eq!(reader.pending_len(), 4, "held, so a change reads them again");
        // A too-long line after zeros is skipped past them too.
        let mut reader = LineReader::new(Box::new(io::Cursor::new(b"\0\0xxxxxxxxxxxxxxxx\nok\n".to_vec())), 0, 5);
        assert!(reader.next_line(false).is_err());
        assert!(!reader.skip_long_line() && reader.skip_rest(false).unwrap());
        assert_eq!(reader.position, 19, "the zeros and the long line with its newline");
        assert_eq!(reader.next_line(false).unwrap().unwrap(), (b"ok".as_slice(), 22));
    }

    #[test]
    fn bytes_after_the_last_gzip_member_are_ignored_as_gzip_does() {
        let gz = |text: &[u8]| {
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(text).unwrap();
            encoder.finish().unwrap()
        };
        let lines = |file: Vec<u8>| -> io::Result<Vec<Vec<u8>>> {
            let mut reader = LineReader::gzip(Box::new(io::Cursor::new(file)), 0, 100, Rc::default())?;
            let mut lines = Vec::new();
            while let Some((line, _)) = reader.next_line(false)? {
                lines.push(line.to_vec());
            }
            Ok(lines)
        };
        let two = [gz(b"a\nb\n"), gz(b"c\n")].concat();
        for trailing in [vec![0u8; 1024], b"TRAILING GARBAGE\n".to_vec()] {
            let file = [two.clone(), trailing].concat();
            assert_eq!(lines(file).unwrap(), [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        }
        assert!(lines(b"not gzip at all\n".to_vec()).is_err(), "a file that is not gzip still fails");
    }

    #[test]
    fn gzip_resumes_and_whole_files_are_capped() {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(b"x\ny\n").unwrap();
        let gz = encoder.finish().unwrap();
        let head = Rc::new(RefCell::new(Vec::new()));
        let mut reader = LineReader::gzip(Box::new(io::Cursor::new(gz.clone())), 2, 100, Rc::clone(&head)).unwrap();
        assert_eq!(head.borrow().as_slice(), b"x\n", "the skipped bytes are the head's first");
        assert_eq!(reader.next_line(false).unwrap().unwrap().0, b"y");
        assert_eq!(head.borrow().as_slice(), b"x\ny\n", "then those read");
        assert_eq!(reader.position, 4);
        assert_eq!(read_whole(Box::new(io::Cursor::new(gz.clone())), true, 4, "cap").unwrap(), b"x\ny\n");
        assert!(read_whole(Box::new(io::Cursor::new(gz)), true, 3, "cap").unwrap_err().to_string().contains("cap"));
    }
}
