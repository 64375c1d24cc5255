//! Test workloads of files, shared by the integration and end-to-end binaries: mixed
//! files (large, gzipped, empty, no trailing newline, CRLF) and the lines a reader must
//! produce from each.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Writes a file the way uploaders should: under a hidden name, then renamed.
pub fn drop_file(dir: &Path, name: &str, bytes: &[u8]) {
    let hidden = dir.join(format!(".{name}.part"));
    std::fs::write(&hidden, bytes).unwrap();
    std::fs::rename(hidden, dir.join(name)).unwrap();
}

pub fn gzip(text: &str) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(text.as_bytes()).unwrap();
    encoder.finish().unwrap()
}

/// The lines a reader must produce from `text`.
pub fn lines_of(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l).to_string()).collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines
}

/// Drops `count` mixed files named `<prefix>-fNN...` into `dir`; `large` of them have
/// `large_lines` lines. Returns the expected lines of every file that has any.
pub fn drop_mixed(
    dir: &Path,
    prefix: &str,
    count: usize,
    large: usize,
    large_lines: usize,
) -> BTreeMap<String, Vec<String>> {
    let mut expected = BTreeMap::new();
    for n in 0..count {
        let name = format!("{prefix}-f{n:02}");
        let (file, text, bytes): (String, String, Vec<u8>) = match n {
            n if n < large => {
                let text: String =
                    (0..large_lines).map(|i| format!("{name} large line {i} {}\n", "x".repeat(60))).collect();
                (format!("{name}.log"), text.clone(), text.into_bytes())
            }
            n if n % 5 == 1 => {
                let text: String = (0..500).map(|i| format!("{name} zipped {i}\n")).collect();
                (format!("{name}.log.gz"), text.clone(), gzip(&text))
            }
            n if n % 7 == 2 => (format!("{name}.log"), String::new(), Vec::new()),
            n if n % 7 == 3 => {
                let text = format!("{name} a\n{name} b\n{name} last without newline");
                (format!("{name}.log"), text.clone(), text.into_bytes())
            }
            n if n % 7 == 4 => {
                let text = format!("{name} crlf 1\r\n{name} crlf 2\r\n");
                (format!("{name}.log"), text.clone(), text.into_bytes())
            }
            n => {
                let text: String = (0..(50 + n * 7)).map(|i| format!("{name} line {i}\n")).collect();
                (format!("{name}.log"), text.clone(), text.into_bytes())
            }
        };
        drop_file(dir, &file, &bytes);
        let lines = lines_of(&text);
        if !lines.is_empty() {
            expected.insert(file, lines);
        }
    }
    expected
}
