//! The canonical form of source partitions and offsets: JSON objects of primitive values
//! (as in Kafka Connect), keys sorted, so that equal partitions are equal strings. Stores
//! key offsets by this form.

use serde_json::{Map, Value};

/// Parses `text` as a JSON object of primitive values and returns it in canonical form.
pub fn canonical_object(text: &str) -> Result<String, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(map) = value else {
        return Err(format!("not a JSON object: {}", shorten(text)));
    };
    if let Some((key, _)) = map.iter().find(|(_, v)| matches!(v, Value::Array(_) | Value::Object(_))) {
        return Err(format!("value of \"{key}\" is not a primitive (string, number, boolean or null)"));
    }
    // serde_json's Map is ordered by key, so this is the canonical form.
    Ok(Value::Object(Map::from_iter(map)).to_string())
}

/// Checks that `text` is a JSON object of primitive values without building it (the
/// per-record check; [`canonical_object`] is kept for what is stored and compared).
pub fn check_object(text: &str) -> Result<(), String> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

    /// Accepts a primitive; consumes and reports a nested array or object.
    struct Primitive(bool);
    impl<'de> serde::Deserialize<'de> for Primitive {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct PrimitiveVisitor;
            impl<'de> Visitor<'de> for PrimitiveVisitor {
                type Value = Primitive;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON value")
                }
                fn visit_bool<E>(self, _: bool) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_i64<E>(self, _: i64) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_u64<E>(self, _: u64) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_f64<E>(self, _: f64) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_str<E>(self, _: &str) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_unit<E>(self) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Primitive, A::Error> {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(Primitive(false))
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Primitive, A::Error> {
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(Primitive(false))
                }
            }
            deserializer.deserialize_any(PrimitiveVisitor)
        }
    }

    struct ObjectVisitor;
    impl<'de> Visitor<'de> for ObjectVisitor {
        type Value = Result<(), String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut nested = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if !map.next_value::<Primitive>()?.0 && nested.is_none() {
                    nested = Some(key.into_owned());
                }
            }
            Ok(match nested {
                Some(key) => Err(format!("value of \"{key}\" is not a primitive (string, number, boolean or null)")),
                None => Ok(()),
            })
        }
    }

    let mut deserializer = serde_json::Deserializer::from_str(text);
    match deserializer.deserialize_map(ObjectVisitor).and_then(|checked| deserializer.end().map(|_| checked)) {
        Ok(checked) => checked,
        Err(e) if e.is_data() => Err(format!("not a JSON object: {}", shorten(text))),
        Err(e) => Err(format!("not JSON ({e})")),
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
        ] {
            assert_eq!(check_object(text).is_ok(), canonical_object(text).is_ok(), "{text}");
        }
        assert!(check_object(r#"{"a":[1,2]}"#).unwrap_err().contains("\"a\""));
    }
}
