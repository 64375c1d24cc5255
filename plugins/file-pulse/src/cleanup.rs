//! Names cleanup gives files: a taken name gets a number, and still fits the filesystem's
//! limit on a name; a file being cleaned up is held under a hidden name beside it while
//! cleanup checks that it is still the file that was read.

/// The longest file name most filesystems take, in bytes.
pub const NAME_MAX: usize = 255;

/// `<stem>-<n><extension>`, with the stem (or, when that is not enough, the extension) cut
/// at a character boundary so the name still fits [`NAME_MAX`]: a name already at the
/// limit taken twice would otherwise never be moved ("File name too long").
pub fn numbered_name(stem: &str, n: u32, extension: &str) -> String {
    let suffix = format!("-{n}");
    let cut = |text: &str, room: usize| {
        let mut end = room.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text[..end].to_string()
    };
    let room = NAME_MAX.saturating_sub(suffix.len() + extension.len());
    if room > 0 {
        return format!("{}{suffix}{extension}", cut(stem, room));
    }
    format!("{suffix}{}", cut(extension, NAME_MAX - suffix.len()))
}

/// What ends the hidden name a file is held under while its cleanup checks it.
const CLAIM_SUFFIX: &str = ".sluice-cleanup";

/// `.<name>.sluice-cleanup`: the hidden name (the listing skips hidden names) a file named
/// `name` is held under while its cleanup checks it, `name` cut at a character boundary
/// where the whole would not fit [`NAME_MAX`].
pub fn claim_name(name: &str) -> String {
    let mut end = NAME_MAX.saturating_sub(1 + CLAIM_SUFFIX.len()).min(name.len());
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!(".{}{CLAIM_SUFFIX}", &name[..end])
}

/// The name a file held under `hidden` (a [`claim_name`]) had, if `hidden` is one.
pub fn claimed_from(hidden: &str) -> Option<&str> {
    hidden.strip_prefix('.')?.strip_suffix(CLAIM_SUFFIX).filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_names_fit_the_limit() {
        assert_eq!(numbered_name("a", 1, ".log"), "a-1.log");
        let long = "é".repeat(126);
        let named = numbered_name(&long, 12, ".log");
        assert!(named.len() <= NAME_MAX && named.ends_with("-12.log"), "{named}");
        assert!(named.starts_with("éé"));
        let all_extension = format!(".{}", "x".repeat(254));
        let named = numbered_name("a", 3, &all_extension);
        assert!(named.len() == NAME_MAX && named.starts_with("-3.x"), "{named}");
    }

    #[test]
    fn claim_names_are_hidden_fit_the_limit_and_say_the_name() {
        assert_eq!(claim_name("data.csv"), ".data.csv.sluice-cleanup");
        assert_eq!(claimed_from(&claim_name("data.csv")), Some("data.csv"));
        assert_eq!(claimed_from(".data.csv"), None);
        assert_eq!(claimed_from("..sluice-cleanup"), None);
        let long = "é".repeat(127);
        let claimed = claim_name(&long);
        assert!(claimed.len() <= NAME_MAX && claimed.starts_with(".é"), "{claimed}");
        assert!(long.starts_with(claimed_from(&claimed).unwrap()));
    }
}
