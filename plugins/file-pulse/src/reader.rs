//! Reading one file from a position: lines (without `\n` or `\r\n`) or the whole file,
//! `.gz` decompressed. Memory stays bounded by the buffer and the longest line.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};

/// Lines longer than this fail the file rather than exhaust the sandbox's memory.
pub const MAX_LINE_BYTES: usize = 16 << 20;

pub struct LineReader {
    source: BufReader<Box<dyn Read>>,
    /// Bytes consumed, counting only complete lines (and a final line without newline).
    pub position: u64,
    /// A line whose newline has not been written yet (tail mode holds it back).
    pending: Vec<u8>,
}

impl LineReader {
    /// Reads lines from `source`, which must start at byte `position` of the file.
    pub fn from_source(source: Box<dyn Read>, position: u64) -> LineReader {
        LineReader { source: BufReader::with_capacity(64 << 10, source), position, pending: Vec::new() }
    }

    /// Opens `path` and skips to `position` (a seek, or decompressing up to it for `.gz`).
    pub fn open(path: &str, position: u64) -> io::Result<LineReader> {
        let mut file = File::open(path)?;
        let source: Box<dyn Read> = if path.ends_with(".gz") {
            let mut decoder = flate2::read::MultiGzDecoder::new(file);
            let skipped = io::copy(&mut (&mut decoder).take(position), &mut io::sink())?;
            if skipped < position {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file is shorter than its committed offset"));
            }
            Box::new(decoder)
        } else {
            file.seek(SeekFrom::Start(position))?;
            Box::new(file)
        };
        Ok(LineReader::from_source(source, position))
    }

    /// The next line, or `None` at the end of what is there now. With `hold_partial`, a
    /// last line without its newline is kept back until the newline arrives (tail mode);
    /// otherwise it is returned as the file's last line.
    pub fn next_line(&mut self, hold_partial: bool) -> io::Result<Option<Vec<u8>>> {
        loop {
            let available = self.source.fill_buf()?;
            if available.is_empty() {
                if self.pending.is_empty() || hold_partial {
                    return Ok(None);
                }
                self.position += self.pending.len() as u64;
                return Ok(Some(std::mem::take(&mut self.pending)));
            }
            match available.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    self.pending.extend_from_slice(&available[..end]);
                    self.source.consume(end + 1);
                    self.position += self.pending.len() as u64 + 1;
                    let mut line = std::mem::take(&mut self.pending);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    return Ok(Some(line));
                }
                None => {
                    let n = available.len();
                    self.pending.extend_from_slice(available);
                    self.source.consume(n);
                    if self.pending.len() > MAX_LINE_BYTES {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("a line is longer than {MAX_LINE_BYTES} bytes"),
                        ));
                    }
                }
            }
        }
    }
}

/// The whole content (decompressed for `.gz`), refused above `max` bytes.
pub fn read_whole(path: &str, max: u64) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let source: Box<dyn Read> =
        if path.ends_with(".gz") { Box::new(flate2::read::MultiGzDecoder::new(file)) } else { Box::new(file) };
    let mut content = Vec::new();
    source.take(max + 1).read_to_end(&mut content)?;
    if content.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("file is larger than read.bytes.max.size ({max} bytes)"),
        ));
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines(path: &str, from: u64, hold: bool) -> (Vec<String>, u64) {
        let mut reader = LineReader::open(path, from).unwrap();
        let mut out = Vec::new();
        while let Some(line) = reader.next_line(hold).unwrap() {
            out.push(String::from_utf8(line).unwrap());
        }
        (out, reader.position)
    }

    #[test]
    fn lines_crlf_no_trailing_newline_resume_and_gzip() {
        let dir = std::env::temp_dir().join(format!("file-pulse-reader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("a.log");
        std::fs::write(&plain, "one\r\ntwo\nthree").unwrap();
        let plain = plain.to_str().unwrap();
        assert_eq!(lines(plain, 0, false), (vec!["one".into(), "two".into(), "three".into()], 14));
        assert_eq!(lines(plain, 5, false), (vec!["two".into(), "three".into()], 14));
        // Tail mode holds the unfinished last line back.
        assert_eq!(lines(plain, 0, true), (vec!["one".into(), "two".into()], 9));

        let gz = dir.join("b.log.gz");
        let mut encoder =
            flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), flate2::Compression::default());
        encoder.write_all(b"x\ny\n").unwrap();
        encoder.finish().unwrap();
        let gz = gz.to_str().unwrap();
        assert_eq!(lines(gz, 0, false), (vec!["x".into(), "y".into()], 4));
        assert_eq!(lines(gz, 2, false), (vec!["y".into()], 4));
        assert_eq!(read_whole(gz, 4).unwrap(), b"x\ny\n");
        assert!(read_whole(gz, 3).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
