//! file-pulse's config keys: their documentation (served through `config-def`) and their
//! parsing, with errors that name the key.

use std::collections::BTreeMap;

/// (name, default, importance, documentation); `None` default = required.
pub const KEYS: &[(&str, Option<&str>, &str, &str)] = &[
    ("topic", None, "high", "Destination topic."),
    (
        "fs.listing.directory.path",
        None,
        "high",
        "Directory to scan. Grant it with sandbox.fs.read (sandbox.fs.write when cleanup deletes or moves).",
    ),
    (
        "fs.listing.interval.ms",
        Some("1000"),
        "medium",
        "How often the connector lists the directory (at its ticks: under monitor.interval.ms, lower that too).",
    ),
    ("fs.listing.recursive", Some("false"), "medium", "Descend into subdirectories."),
    (
        "file.filter.regex.pattern",
        Some(".*"),
        "medium",
        "Only files whose whole name matches are streamed, as in FilePulse (`.*\\.csv` takes `a.csv`, not `a.csv.tmp`).",
    ),
    (
        "file.filter.minimum.age.ms",
        Some("0"),
        "medium",
        "A file is streamed only once it has not been modified for this long, so one still being copied in (cp, scp) is not read part way and again; 0 streams files at once.",
    ),
    ("fs.cleanup.policy", Some("none"), "medium", "What happens to a finished file: none, delete, or move."),
    ("fs.cleanup.policy.move.success.path", Some(""), "medium", "With move: where finished files go."),
    (
        "fs.cleanup.policy.move.failure.path",
        Some(""),
        "medium",
        "With move: where files that could not be read go (default: the success path).",
    ),
    (
        "read.mode",
        Some("lines"),
        "medium",
        "lines (one record per line, without the newline) or bytes (one record per file).",
    ),
    ("read.bytes.max.size", Some("10485760"), "low", "With read.mode=bytes: larger files are refused (marked failed)."),
    (
        "file.completion",
        Some("eof"),
        "medium",
        "eof (done at end of file) or tail (follow appends until removed, rotated or idle).",
    ),
    (
        "eof.quiet.ms",
        Some("1000"),
        "low",
        "With eof: a file at its end that was modified less than this long ago (copied into the folder in place, the copy still under way) is read on as it grows, its last line held until it ends, and finished once it has been quiet this long, rather than finished part way and sent again whole; 0 finishes at once.",
    ),
    (
        "tail.idle.ms",
        Some("300000"),
        "low",
        "With tail: a file that has not grown for this long is done (and read on if it grows again); 0 means never.",
    ),
    (
        "tail.rotation.grace.ms",
        Some("2000"),
        "low",
        "With tail: a file renamed away (rotated) is read on until it has not grown for this long, so lines its writer adds just after the rename are not lost.",
    ),
    (
        "task.stall.timeout.ms",
        Some("30000"),
        "medium",
        "A task whose unfinished files show no committed progress for this long is restarted.",
    ),
    ("poll.max.records", Some("2000"), "low", "Most records a task returns per poll."),
    ("poll.max.bytes", Some("4194304"), "low", "Most bytes a task returns per poll."),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleanup {
    None,
    Delete,
    Move,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    Lines,
    Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    Eof,
    Tail,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub topic: String,
    /// The host's `sandbox.record.max.bytes`: a line or file that cannot fit in one record
    /// fails its file alone instead of the task.
    pub record_max_bytes: u64,
    /// The host's `errors.tolerance=all`: a line too long for a record is skipped (with a
    /// warning) rather than failing its file.
    pub skip_long_lines: bool,
    pub directory: String,
    pub listing_interval_ms: u64,
    pub recursive: bool,
    pub filter: regex_lite::Regex,
    /// The pattern as typed, found anywhere in a name (how it matched before it matched
    /// whole names): a name it takes that `filter` leaves out is warned about.
    pub filter_found_in: Option<regex_lite::Regex>,
    pub minimum_age_ms: u64,
    pub cleanup: Cleanup,
    pub move_success: String,
    pub move_failure: String,
    pub read_mode: ReadMode,
    pub bytes_max: u64,
    pub completion: Completion,
    pub eof_quiet_ms: u64,
    pub tail_idle_ms: u64,
    pub rotation_grace_ms: u64,
    pub stall_timeout_ms: u64,
    pub poll_max_records: usize,
    pub poll_max_bytes: usize,
}

/// `(key, reason)`
pub type Problem = (String, String);

impl Settings {
    /// The settings of `config`, or its first problem.
    pub fn parse(config: &BTreeMap<String, String>) -> Result<Settings, Problem> {
        Settings::parse_all(config).map_err(|mut problems| problems.swap_remove(0))
    }

    /// The settings of `config`, or every key's problem (as Connect's validate lists them
    /// all, so a form shows each beside its key at once).
    pub fn parse_all(config: &BTreeMap<String, String>) -> Result<Settings, Vec<Problem>> {
        let get = |key: &str| -> String {
            match config.get(key) {
                Some(v) => v.trim().to_string(),
                None => KEYS.iter().find(|k| k.0 == key).and_then(|k| k.1).unwrap_or("").to_string(),
            }
        };
        let problems = std::cell::RefCell::new(Vec::new());
        // A key's value, or its problem noted and a stand-in so the other keys are checked.
        fn noted<T>(problems: &std::cell::RefCell<Vec<Problem>>, value: Result<T, Problem>, stand_in: T) -> T {
            value.unwrap_or_else(|problem| {
                problems.borrow_mut().push(problem);
                stand_in
            })
        }
        let problem = |key: &str, reason: String| (key.to_string(), reason);
        let required = |key: &str| -> String {
            let value = get(key);
            noted(
                &problems,
                if value.is_empty() { Err(problem(key, "required".into())) } else { Ok(value) },
                String::new(),
            )
        };
        let number = |key: &str| -> u64 {
            let value = get(key);
            noted(
                &problems,
                value.parse().map_err(|_| problem(key, format!("'{value}' is not a non-negative integer"))),
                0,
            )
        };
        // A poll that may return nothing would never move on.
        let positive = |key: &str| -> u64 {
            let n = number(key);
            if n == 0 && !problems.borrow().iter().any(|(k, _)| k == key) {
                problems.borrow_mut().push(problem(key, "must be at least 1".into()));
            }
            n.max(1)
        };
        let boolean = |key: &str| -> bool {
            let value = match get(key).to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                other => Err(problem(key, format!("'{other}' is not true or false"))),
            };
            noted(&problems, value, false)
        };
        let pattern = get("file.filter.regex.pattern");
        // The whole name must match, as FilePulse's `RegexFileListFilter` matches it: found
        // anywhere in the name, `.*\.csv` took `data.csv.tmp` and a rotated `app.log.1.gz`
        // too (the rotated log's lines sent twice).
        let filter = if pattern.is_empty() {
            Err(problem("file.filter.regex.pattern", "empty: '.*' streams every file".to_string()))
        } else {
            // `.` takes a newline too: a name may have one, and `.*` means every file.
            regex_lite::Regex::new(&format!("(?s)^(?:{pattern})$")).map_err(|e| {
                problem("file.filter.regex.pattern", format!("'{pattern}' is not a valid regular expression: {e}"))
            })
        };
        let filter = match filter {
            Ok(filter) => filter,
            Err(problem) => noted(&problems, Err(problem), regex_lite::Regex::new(".*").expect("a valid pattern")),
        };
        let filter_found_in = regex_lite::Regex::new(&pattern).ok().filter(|_| !pattern.is_empty());
        let cleanup = match get("fs.cleanup.policy").as_str() {
            "none" => Ok(Cleanup::None),
            "delete" => Ok(Cleanup::Delete),
            "move" => Ok(Cleanup::Move),
            other => {
                Err(problem("fs.cleanup.policy", format!("unknown policy '{other}' (expected none, delete or move)")))
            }
        };
        let cleanup = noted(&problems, cleanup, Cleanup::None);
        let move_success = get("fs.cleanup.policy.move.success.path");
        if cleanup == Cleanup::Move && move_success.is_empty() {
            problems
                .borrow_mut()
                .push(problem("fs.cleanup.policy.move.success.path", "required when fs.cleanup.policy is move".into()));
        }
        let move_failure = match get("fs.cleanup.policy.move.failure.path") {
            empty if empty.is_empty() => move_success.clone(),
            path => path,
        };
        // `a//b` is `a/b`; said as given, a path is matched against the grants as text.
        let plain = |path: &str| {
            let joined: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
            if path.starts_with('/') { format!("/{}", joined.join("/")) } else { joined.join("/") }
        };
        let move_success = plain(&move_success);
        let move_failure = plain(&move_failure);
        let directory = plain(&required("fs.listing.directory.path"));
        // The plugin sees the granted directories by their absolute paths only: a relative
        // one would be "not found" with no word of why.
        for (key, path) in [
            ("fs.listing.directory.path", &directory),
            ("fs.cleanup.policy.move.success.path", &move_success),
            ("fs.cleanup.policy.move.failure.path", &move_failure),
        ] {
            let reported = problems.borrow().iter().any(|(k, _)| k == key);
            if !path.is_empty() && !path.starts_with('/') && !reported {
                problems
                    .borrow_mut()
                    .push(problem(key, format!("'{path}' is a relative path: give the absolute path")));
            } else if path.split('/').any(|part| part == "." || part == "..") && !reported {
                // Matched against the grants as text, `/in/../in` would be "not granted".
                problems.borrow_mut().push(problem(
                    key,
                    format!("'{path}' has a '.' or '..' step: give the directory's path without them"),
                ));
            }
        }
        if cleanup == Cleanup::Move && !directory.is_empty() {
            for (key, path) in [
                ("fs.cleanup.policy.move.success.path", &move_success),
                ("fs.cleanup.policy.move.failure.path", &move_failure),
            ] {
                if *path == directory && !problems.borrow().iter().any(|(k, _)| k == key) {
                    problems.borrow_mut().push(problem(
                        key,
                        format!("'{path}' is the listed directory itself: files moved there would be read again"),
                    ));
                }
            }
        }
        let read_mode = match get("read.mode").as_str() {
            "lines" => Ok(ReadMode::Lines),
            "bytes" => Ok(ReadMode::Bytes),
            other => Err(problem("read.mode", format!("unknown mode '{other}' (expected lines or bytes)"))),
        };
        let read_mode = noted(&problems, read_mode, ReadMode::Lines);
        let completion = match get("file.completion").as_str() {
            "eof" => Ok(Completion::Eof),
            "tail" => Ok(Completion::Tail),
            other => Err(problem("file.completion", format!("unknown completion '{other}' (expected eof or tail)"))),
        };
        let completion = noted(&problems, completion, Completion::Eof);
        let settings = Settings {
            filter_found_in,
            topic: required("topic"),
            directory,
            record_max_bytes: match config.get("sandbox.record.max.bytes") {
                // The host's default; the host refuses a record above its cap either way.
                None => 1 << 20,
                Some(_) => number("sandbox.record.max.bytes"),
            },
            // The host checks the value; only `all` skips.
            skip_long_lines: config.get("errors.tolerance").is_some_and(|t| t.trim() == "all"),
            listing_interval_ms: number("fs.listing.interval.ms"),
            recursive: boolean("fs.listing.recursive"),
            filter,
            minimum_age_ms: number("file.filter.minimum.age.ms"),
            cleanup,
            move_success,
            move_failure,
            read_mode,
            bytes_max: number("read.bytes.max.size"),
            completion,
            eof_quiet_ms: number("eof.quiet.ms"),
            tail_idle_ms: number("tail.idle.ms"),
            rotation_grace_ms: number("tail.rotation.grace.ms"),
            stall_timeout_ms: number("task.stall.timeout.ms"),
            poll_max_records: positive("poll.max.records") as usize,
            poll_max_bytes: positive("poll.max.bytes") as usize,
        };
        let problems = problems.into_inner();
        if problems.is_empty() { Ok(settings) } else { Err(problems) }
    }
}

impl Settings {
    /// Whether a listing pass is due at `now_ms` when the last one started at `last_ms`.
    /// The connector is ticked every `monitor.interval.ms`, a little early or late: a tick
    /// up to a tenth of the interval (at most 100 ms) before the due time counts, or an
    /// interval equal to the tick's would list only every other tick.
    pub fn listing_due(&self, now_ms: u64, last_ms: u64) -> bool {
        let slack = (self.listing_interval_ms / 10).min(100);
        now_ms.saturating_sub(last_ms) + slack >= self.listing_interval_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_limit_of_zero_is_refused_naming_the_key() {
        for key in ["poll.max.records", "poll.max.bytes"] {
            let problems = parse(&[(key, "0")]).err().unwrap_or_else(|| panic!("{key}=0 accepted"));
            assert_eq!(problems, (key.to_string(), "must be at least 1".to_string()));
        }
        assert_eq!(parse(&[("poll.max.records", "1")]).unwrap().poll_max_records, 1);
    }

    #[test]
    fn the_filter_matches_whole_names_as_filepulse_does() {
        let csv = parse(&[("file.filter.regex.pattern", r".*\.csv")]).unwrap();
        assert!(csv.filter.is_match("data.csv"));
        for other in ["data.csv.tmp", "data.csv.1.gz", "x"] {
            assert!(!csv.filter.is_match(other), "{other}");
        }
        let either = parse(&[("file.filter.regex.pattern", "a|b")]).unwrap();
        assert!(either.filter.is_match("b") && !either.filter.is_match("ab"), "the whole pattern is anchored");
        // A name may hold a newline: the default `.*` takes it, as every other name.
        let every = parse(&[]).unwrap();
        assert!(every.filter.is_match("report\n2024.txt") && every.filter.is_match("\n"));
        assert!(csv.filter.is_match("q\n3.csv") && !csv.filter.is_match("q.csv\n"));
        let problems = parse(&[("file.filter.regex.pattern", "")]).err().unwrap();
        assert_eq!(problems.0, "file.filter.regex.pattern");
    }

    #[test]
    fn a_tick_a_little_early_still_lists() {
        let settings = parse(&[("fs.listing.interval.ms", "1000")]).unwrap();
        assert!(settings.listing_due(10_995, 10_000), "a 1 s tick 5 ms early lists");
        assert!(settings.listing_due(11_000, 10_000));
        assert!(!settings.listing_due(10_500, 10_000), "half an interval is not due");
        let fast = parse(&[("fs.listing.interval.ms", "50")]).unwrap();
        assert!(fast.listing_due(10_045, 10_000) && !fast.listing_due(10_040, 10_000));
    }

    fn parse(pairs: &[(&str, &str)]) -> Result<Settings, Problem> {
        let mut config: BTreeMap<String, String> = [("topic", "t"), ("fs.listing.directory.path", "/in")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        config.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Settings::parse(&config)
    }

    #[test]
    fn defaults_and_errors_name_the_key() {
        let s = parse(&[]).unwrap();
        assert_eq!(
            (s.cleanup, s.read_mode, s.completion, s.stall_timeout_ms),
            (Cleanup::None, ReadMode::Lines, Completion::Eof, 30000)
        );
        assert!(s.filter.is_match("anything"));
        assert_eq!(parse(&[("topic", "")]).unwrap_err().0, "topic");
        assert_eq!(parse(&[("file.filter.regex.pattern", "([")]).unwrap_err().0, "file.filter.regex.pattern");
        assert_eq!(parse(&[("fs.cleanup.policy", "shred")]).unwrap_err().0, "fs.cleanup.policy");
        assert_eq!(parse(&[("fs.cleanup.policy", "move")]).unwrap_err().0, "fs.cleanup.policy.move.success.path");
        let moved = parse(&[("fs.cleanup.policy", "move"), ("fs.cleanup.policy.move.success.path", "/done/")]).unwrap();
        assert_eq!(moved.move_failure, "/done");
        let doubled = parse(&[("fs.listing.directory.path", "//in//sub/")]).unwrap();
        assert_eq!(doubled.directory, "/in/sub");
        let stepped = parse(&[("fs.listing.directory.path", "/in/../in")]).unwrap_err();
        assert_eq!(stepped.0, "fs.listing.directory.path");
        assert!(stepped.1.contains("'..'"), "{}", stepped.1);
        let stepped = parse(&[("fs.cleanup.policy", "move"), ("fs.cleanup.policy.move.success.path", "/done/.")]);
        assert_eq!(stepped.unwrap_err().0, "fs.cleanup.policy.move.success.path");
        let into_itself = parse(&[("fs.cleanup.policy", "move"), ("fs.cleanup.policy.move.success.path", "/in/")]);
        assert_eq!(into_itself.unwrap_err().0, "fs.cleanup.policy.move.success.path");
        assert_eq!(parse(&[]).unwrap().record_max_bytes, 1 << 20);
        // Every key's problem at once, as Connect's validate lists them.
        let mut config: BTreeMap<String, String> = [
            ("fs.listing.directory.path", "/in"),
            ("tail.idle.ms", "-5"),
            ("read.mode", "chars"),
            ("fs.listing.recursive", "yes"),
            ("task.stall.timeout.ms", "-1"),
            ("file.filter.regex.pattern", "("),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let keys = |config: &BTreeMap<String, String>| {
            let mut keys: Vec<String> = Settings::parse_all(config).unwrap_err().into_iter().map(|(k, _)| k).collect();
            keys.sort();
            keys
        };
        let expected = [
            "file.filter.regex.pattern",
            "fs.listing.recursive",
            "read.mode",
            "tail.idle.ms",
            "task.stall.timeout.ms",
            "topic",
        ];
        assert_eq!(keys(&config), expected);
        config.insert("fs.cleanup.policy".into(), "move".into());
        assert!(keys(&config).contains(&"fs.cleanup.policy.move.success.path".to_string()));
        assert_eq!(parse(&[("sandbox.record.max.bytes", "100")]).unwrap().record_max_bytes, 100);
        assert!(!parse(&[]).unwrap().skip_long_lines);
        let relative = parse(&[("fs.listing.directory.path", "in")]).unwrap_err();
        assert_eq!(relative.0, "fs.listing.directory.path");
        assert!(relative.1.contains("relative path"), "{relative:?}");
        assert!(parse(&[("errors.tolerance", "all")]).unwrap().skip_long_lines);
    }
}
