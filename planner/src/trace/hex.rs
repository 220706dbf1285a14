//! Bytes in a trace record are written as lower-case hex strings (a line stays text); in memory
//! they are bytes. One codec for every such field.

use serde::{Deserialize, Deserializer, Serializer};

/// Lower-case hex of `b`.
pub fn encode(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * b.len());
    for &x in b {
        s.push(DIGITS[(x >> 4) as usize] as char);
        s.push(DIGITS[(x & 15) as usize] as char);
    }
    s
}

/// The bytes of a hex string (either case); None if it is not one.
pub fn decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `#[serde(with = "hex::bytes")]`: a `Vec<u8>` as a hex string.
pub mod bytes {
    use super::*;

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        decode(&s).ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not hex")))
    }
}

/// `#[serde(with = "hex::optional")]`: an `Option<Vec<u8>>` as a hex string or absent.
pub mod optional {
    use super::*;

    pub fn serialize<S: Serializer>(b: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match b {
            Some(b) => s.serialize_some(&encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(s) => decode(&s)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not hex"))),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&b)), Some(b));
        assert_eq!(encode(&[0x0f, 0xa0]), "0fa0");
        assert_eq!(decode("0FA0"), Some(vec![0x0f, 0xa0]));
        assert_eq!(decode("abc"), None);
        assert_eq!(decode("zz"), None);
    }
}
