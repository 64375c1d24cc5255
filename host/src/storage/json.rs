//! The canonical form of source partitions and offsets: JSON objects of primitive values
//! (as in Kafka Connect), keys sorted, so that equal partitions are equal strings. Stores
//! key offsets by this form.

use serde_json::{Map, Value};

/// Parses `text` as a JSON object of primitive values and returns it in canonical form.
pub fn canonical_object(text: &str) -> Result<String, String> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| format!("not JSON ({e}): {}", crate::runtime::plugin_log::escape_controls(&shorten(text))))?;
    let Value::Object(map) = value else {
        return Err(format!("not a JSON object: {}", shorten(text)));
    };
    if let Some((key, _)) = map.iter().find(|(_, v)| matches!(v, Value::Array(_) | Value::Object(_))) {
        return Err(format!("an object whose \"{key}\" is not a primitive (string, number, boolean or null)"));
    }
    // An integer literal past 64 bits was read as a float: the only kind of number that
    // could be one is looked at again in the text (`1e300` is a float, and kept).
    if map.values().any(|v| matches!(v, Value::Number(n) if inexact_integer(n))) {
        let raw: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
            serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
        if let Some((key, _)) = raw.iter().find(|(_, v)| integer_literal_too_wide(v.get())) {
            return Err(too_wide(key));
        }
    }
    // serde_json's Map is ordered by key, so this is the canonical form.
    Ok(Value::Object(Map::from_iter(map)).to_string())
}

/// Whether `n` stands for an integer serde_json could not keep exactly: it reads one beyond
/// 64 bits as a float, whose digits are not those sent.
pub fn inexact_integer(n: &serde_json::Number) -> bool {
    n.is_f64() && n.as_f64().is_some_and(|f| f.fract() == 0.0 && f.abs() >= 9_007_199_254_740_992.0)
}

/// Whether `raw`, a JSON value's text, is an integer literal (no fraction or exponent)
/// that neither an i64 nor a u64 holds: serde_json reads it as a float, rounded.
fn integer_literal_too_wide(raw: &str) -> bool {
    let digits = raw.strip_prefix('-').unwrap_or(raw);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && raw.parse::<i64>().is_err()
        && raw.parse::<u64>().is_err()
}

/// Why a partition or offset with such a number is refused: kept rounded, its digits would
/// change, and two partitions rounded alike would become one.
fn too_wide(key: &str) -> String {
    format!(
        "an object whose \"{key}\" is an integer too large to be kept exactly (at most 64 bits); send it as a string"
    )
}

/// Whether `text` is, plainly, a JSON object of primitives: no whitespace, keys and string
/// values of printable ASCII without escapes, values that are such strings, `true`,
/// `false`, `null` or integers of at most 19 digits (18 below zero). Most offsets are written so; anything
/// else (floats, escapes, other text) is left to the full parser, so this only ever says
/// yes to what the parser accepts.
fn plainly_an_object_of_primitives(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = 0;
    let string = |at: &mut usize| -> bool {
        if bytes.get(*at) != Some(&b'"') {
            return false;
        }
        *at += 1 + plain_run(&bytes[*at + 1..]);
        let closed = bytes.get(*at) == Some(&b'"');
        *at += 1;
        closed
    };
    let integer = |at: &mut usize| -> bool {
        let negative = bytes.get(*at) == Some(&b'-');
        if negative {
            *at += 1;
        }
        let start = *at;
        while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
            *at += 1;
        }
        let digits = *at - start;
        // 19 digits always fit a u64, but not an i64 below zero (then a float, refused).
        let most = if negative { 18 } else { 19 };
        (1..=most).contains(&digits) && (digits == 1 || bytes[start] != b'0')
    };
    if bytes.first() != Some(&b'{') {
        return false;
    }
    at += 1;
    if bytes.get(at) == Some(&b'}') {
        return at + 1 == bytes.len();
    }
    loop {
        if !string(&mut at) || bytes.get(at) != Some(&b':') {
            return false;
        }
        at += 1;
        let value = match bytes.get(at) {
            Some(b'"') => string(&mut at),
            Some(b't') if bytes[at..].starts_with(b"true") => {
                at += 4;
                true
            }
            Some(b'f') if bytes[at..].starts_with(b"false") => {
                at += 5;
                true
            }
            Some(b'n') if bytes[at..].starts_with(b"null") => {
                at += 4;
                true
            }
            Some(b'-' | b'0'..=b'9') => integer(&mut at),
            _ => false,
        };
        if !value {
            return false;
        }
        match bytes.get(at) {
            Some(b',') => at += 1,
            Some(b'}') => return at + 1 == bytes.len(),
            _ => return false,
        }
    }
}

/// How many bytes `bytes` begins with that may stand in a plain string: printable ASCII
/// other than `"` and `\\`. Eight at a time: each test below sets the high bit of the
/// bytes it matches, exactly for the lowest one that matches (a borrow or carry only runs
/// upward from a byte that matched itself). The last few bytes are padded with a zero,
/// which ends the run where they end.
fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES * 0x80;
    let less_than = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH;
    let first_special = |chunk: [u8; 8]| {
        let x = u64::from_le_bytes(chunk);
        let special = less_than(x, 0x20)
            | ((x.wrapping_add(ONES) | x) & HIGH)
            | less_than(x ^ (ONES * u64::from(b'"')), 1)
            | less_than(x ^ (ONES * u64::from(b'\\')), 1);
        (special != 0).then(|| (special.trailing_zeros() / 8) as usize)
    };
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        if let Some(special) = first_special(chunk.try_into().expect("eight bytes")) {
            return at + special;
        }
        at += 8;
    }
    let mut last = [0u8; 8];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    at + first_special(last).expect("the padding ends the run")
}

/// Checks that `text` is a JSON object of primitive values without building it (the
/// per-record check; [`canonical_object`] is kept for what is stored and compared).
pub fn check_object(text: &str) -> Result<(), String> {
    use serde::de::{Deserializer, MapAccess, Visitor};

    if plainly_an_object_of_primitives(text) {
        return Ok(());
    }

    struct ObjectVisitor;
    impl<'de> Visitor<'de> for ObjectVisitor {
        type Value = Result<(), String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut problem = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                // Its text: what kind of value it is shows in its first byte, and an
                // integer too wide for 64 bits in its digits. The raw text is only scanned,
                // so a primitive is parsed too (a number out of range, a lone surrogate
                // are refused, as `canonical_object` refuses them).
                let value = map.next_value::<&'de serde_json::value::RawValue>()?.get();
                if problem.is_none() {
                    problem = if value.starts_with(['[', '{']) {
                        Some(format!("an object whose \"{key}\" is not a primitive (string, number, boolean or null)"))
                    } else if integer_literal_too_wide(value) {
                        Some(too_wide(&key))
                    } else if let Err(e) = serde_json::from_str::<Value>(value) {
                        Some(format!("not JSON (\"{key}\": {e})"))
                    } else {
                        None
                    };
                }
            }
            Ok(problem.map_or(Ok(()), Err))
        }
    }

    let mut deserializer = serde_json::Deserializer::from_str(text);
    match deserializer.deserialize_map(ObjectVisitor).and_then(|checked| deserializer.end().map(|_| checked)) {
        Ok(checked) => checked,
        Err(e) if e.is_data() => Err(format!("not a JSON object: {}", shorten(text))),
        Err(e) => Err(format!("not JSON ({e}): {}", crate::runtime::plugin_log::escape_controls(&shorten(text)))),
    }
}

/// `text`, cut to 80 characters for an error message.
pub fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_canonical_and_primitive() {
        assert_eq!(canonical_object(r#"{"b":1, "a":"x"}"#).unwrap(), r#"{"a":"x","b":1}"#);
        assert!(canonical_object("[1]").unwrap_err().contains("not a JSON object"));
        assert!(canonical_object(r#"{"a":{"b":1}}"#).unwrap_err().contains("\"a\""));
        assert!(canonical_object("{").unwrap_err().starts_with("not JSON"));
        assert!(canonical_object("n=3").unwrap_err().ends_with("): n=3"), "the text refused is shown");
        // Past 64 bits serde_json reads a float: refused, not stored rounded.
        for wide in [r#"{"id":18446744073709551621}"#, r#"{"id":-9223372036854775809}"#] {
            assert!(canonical_object(wide).unwrap_err().contains("\"id\" is an integer too large"), "{wide}");
            assert!(check_object(wide).unwrap_err().contains("\"id\" is an integer too large"), "{wide}");
        }
        for fine in [
            r#"{"id":18446744073709551615}"#,
            r#"{"id":-9223372036854775808}"#,
            r#"{"t":1.5,"u":1e300,"v":18446744073709551621.0}"#,
        ] {
            assert!(canonical_object(fine).is_ok() && check_object(fine).is_ok(), "{fine}");
        }
        assert!(canonical_object(r#"{"n":null,"t":true,"f":1.5}"#).is_ok());
    }

    #[test]
    fn the_canonical_form_is_a_fixed_point() {
        // Found by the record-path fuzzer: without exact float parsing, a subnormal number
        // changed on a second pass, so one partition could become two.
        for text in [r#"{"_":6.153553847794085e-308}"#, r#"{"a":0.1,"b":1e300,"c":-2.5e-320}"#] {
            let once = canonical_object(text).unwrap();
            assert_eq!(canonical_object(&once).unwrap(), once, "{text}");
        }
    }

    #[test]
    fn check_object_agrees_with_canonical_object() {
        for text in [
            r#"{"a":1,"b":"x","c":null,"d":true,"e":-1.5}"#,
            "[1]",
            "{",
            r#"{"a":{"b":1}}"#,
            r#"{"a":[1]}"#,
            "1",
            r#"{"a":1} x"#,
            r#"{"n":1e400}"#,
            r#"{"f":"\udcff"}"#,
            r#"{"f":"\ud83d\ude00","g":1e300}"#,
        ] {
            assert_eq!(check_object(text).is_ok(), canonical_object(text).is_ok(), "{text}");
        }
        assert!(check_object(r#"{"a":[1,2]}"#).unwrap_err().contains("\"a\""));
    }

    /// What the full parser says, without the fast path.
    fn parsed_as_object_of_primitives(text: &str) -> bool {
        serde_json::from_str::<Map<String, Value>>(text)
            .is_ok_and(|map| map.values().all(|v| !v.is_object() && !v.is_array()))
    }

    #[test]
    fn the_fast_offset_check_only_accepts_what_the_parser_accepts() {
        for text in [
            "{}",
            r#"{"path":"inbox/a.log","position":1024,"line":12,"done":false,"end":null}"#,
            r#"{"n":-7,"m":0}"#,
            r#"{"a":01}"#,
            r#"{"a":-}"#,
            r#"{"a":1,}"#,
            r#"{"a":"x\"y"}"#,
            r#"{"a":tru}"#,
            r#"{"a":truex}"#,
            r#"{"a":1}}"#,
            r#"{"a":1} "#,
            r#"{"a":1234567890123456789}"#,
            r#"{"a" :1}"#,
            r#"{"é":1}"#,
            r#"{"a":1,"a":2}"#,
            "{\"a\":\"\u{1}\"}",
        ] {
            if plainly_an_object_of_primitives(text) {
                assert!(parsed_as_object_of_primitives(text), "the fast path accepted {text:?}");
            }
            assert_eq!(check_object(text).is_ok(), parsed_as_object_of_primitives(text), "{text:?}");
        }
        // Random texts of JSON's tokens, well-formed or nearly.
        let tokens = [
            r#""a""#,
            r#""b c""#,
            r#""\n""#,
            ":",
            ",",
            "1",
            "-0",
            "01",
            "-",
            "12345678901234567890",
            "1.5",
            "true",
            "fals",
            "null",
            "[1]",
            "{}",
            "}",
            " ",
            r#"""#,
        ];
        let mut rng = fastrand::Rng::with_seed(7);
        let mut accepted = 0;
        for _ in 0..200_000 {
            let mut text = String::from("{");
            for _ in 0..rng.usize(1..10) {
                text.push_str(tokens[rng.usize(..tokens.len())]);
            }
            if plainly_an_object_of_primitives(&text) {
                accepted += 1;
                assert!(parsed_as_object_of_primitives(&text), "the fast path accepted {text:?}");
            }
        }
        assert!(accepted > 100, "the random texts reach the fast path: {accepted}");
    }

    #[test]
    fn a_plain_run_ends_at_the_first_byte_a_plain_string_cannot_hold() {
        let naive =
            |bytes: &[u8]| bytes.iter().take_while(|&&b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\').count();
        let mut rng = fastrand::Rng::with_seed(3);
        let specials = [0x00, 0x1f, 0x20, 0x21, b'"', b'\\', 0x7e, 0x7f, 0x80, 0xc3, 0xff, b'a'];
        for _ in 0..20_000 {
            let len = rng.usize(0..40);
            let bytes: Vec<u8> = (0..len)
                .map(|_| if rng.u8(..8) == 0 { specials[rng.usize(..specials.len())] } else { rng.u8(0x20..0x7f) })
                .collect();
            assert_eq!(plain_run(&bytes), naive(&bytes), "{bytes:?}");
        }
    }
}
