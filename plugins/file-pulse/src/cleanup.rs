//! Names cleanup gives the files it moves: a taken name gets a number, and still fits the
//! filesystem's limit on a name.

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
}
