//! `[volume.layout_options]`: the KEY = VALUE settings of a layout (RoLo's log share and
//! rotation, QMD's flush budget and buffer, IDO's rebuild order and zone size). One table for
//! every layout: each interprets its own keys (`Personality::set_option`, or its constructor
//! where the keys shape the member layout) and refuses the rest, naming the key. The options a
//! volume was created with are kept in its member headers, like its stripe unit.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// Bounds on what a configuration or a member header may carry (a header is read from disk:
/// never trusted to be small).
const MAX_OPTIONS: usize = 32;
const MAX_KEY_BYTES: usize = 64;
const MAX_VALUE_BYTES: usize = 256;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct LayoutOptions(BTreeMap<String, String>);

impl LayoutOptions {
    /// Options from KEY=VALUE pairs (the command line's `--layout-option`).
    pub fn from_pairs<I, K, V>(pairs: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut map = BTreeMap::new();
        for (k, v) in pairs {
            let (k, v) = (k.into(), v.into());
            check_entry(&k, &v)?;
            if map.insert(k.clone(), v).is_some() {
                return Err(format!("layout option {k:?} is given twice"));
            }
            if map.len() > MAX_OPTIONS {
                return Err(format!("more than {MAX_OPTIONS} layout options"));
            }
        }
        Ok(Self(map))
    }

    /// `KEY=VALUE` arguments.
    pub fn parse_args(args: &[String]) -> Result<Self, String> {
        Self::from_pairs(
            args.iter()
                .map(|a| {
                    a.split_once('=')
                        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                        .ok_or_else(|| format!("layout option {a:?} is not KEY=VALUE"))
                })
                .collect::<Result<Vec<_>, _>>()?,
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// A number option, or None when unset.
    pub fn f64(&self, key: &str) -> Result<Option<f64>, String> {
        self.get(key)
            .map(|v| {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| format!("{key} = {v:?} is not a number"))
            })
            .transpose()
    }

    /// A whole-number option, or None when unset.
    pub fn u64(&self, key: &str) -> Result<Option<u64>, String> {
        self.get(key)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("{key} = {v:?} is not a whole number"))
            })
            .transpose()
    }
}

fn check_entry(key: &str, value: &str) -> Result<(), String> {
    if key.is_empty()
        || key.len() > MAX_KEY_BYTES
        || !key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(format!(
            "layout option name {key:?} must be 1-{MAX_KEY_BYTES} characters of a-z, 0-9 and _"
        ));
    }
    if value.len() > MAX_VALUE_BYTES || value.chars().any(char::is_control) {
        return Err(format!(
            "layout option {key}: the value must be at most {MAX_VALUE_BYTES} printable bytes"
        ));
    }
    Ok(())
}

impl fmt::Display for LayoutOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in &self.0 {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// A value as TOML (or a header) gives it: text, a number or a boolean, kept as text.
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, a number or a boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for LayoutOptions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LayoutOptions;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table of layout options")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LayoutOptions, A::Error> {
                let mut pairs = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Scalar>()? {
                    if pairs.len() >= MAX_OPTIONS {
                        return Err(de::Error::custom(format!(
                            "more than {MAX_OPTIONS} layout options"
                        )));
                    }
                    pairs.push((k, v.0));
                }
                LayoutOptions::from_pairs(pairs).map_err(de::Error::custom)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Doc {
        layout_options: LayoutOptions,
    }

    #[test]
    fn toml_numbers_strings_and_booleans_are_kept_as_text() {
        let d: Doc = toml::from_str(
            "[layout_options]\nlog_share = 0.3\nk = 10\nrebuild = \"workout\"\nflag = true\n",
        )
        .unwrap();
        let o = d.layout_options;
        assert_eq!(o.f64("log_share").unwrap(), Some(0.3));
        assert_eq!(o.u64("k").unwrap(), Some(10));
        assert_eq!(o.get("rebuild"), Some("workout"));
        assert_eq!(o.get("flag"), Some("true"));
        assert_eq!(o.f64("absent").unwrap(), None);
        assert!(o.u64("log_share").unwrap_err().contains("log_share"));
        assert!(o.f64("rebuild").unwrap_err().contains("rebuild"));
    }

    #[test]
    fn hostile_names_values_and_counts_are_refused() {
        assert!(LayoutOptions::parse_args(&["k10".into()]).is_err());
        assert!(LayoutOptions::parse_args(&["K=1".into()]).is_err());
        assert!(LayoutOptions::parse_args(&["k=1".into(), "k=2".into()]).is_err());
        assert!(LayoutOptions::from_pairs([("k", "a\nb")]).is_err());
        assert!(LayoutOptions::from_pairs([("k".repeat(65), "1".to_string())]).is_err());
        assert!(LayoutOptions::from_pairs([("k", "1".repeat(257))]).is_err());
        let many: Vec<_> = (0..33)
            .map(|i| (format!("k{i}"), "1".to_string()))
            .collect();
        assert!(LayoutOptions::from_pairs(many).is_err());
        let nested: Result<Doc, _> = toml::from_str("[layout_options]\nk = [1, 2]\n");
        assert!(nested.is_err());
    }

    #[test]
    fn options_round_trip_through_a_header() {
        let o = LayoutOptions::parse_args(&["zebra_mb=32".into(), "rotate_at=0.7".into()]).unwrap();
        let json = serde_json::to_string(&o).unwrap();
        let back: LayoutOptions = serde_json::from_str(&json).unwrap();
        assert_eq!(o, back);
        assert_eq!(o.to_string(), "rotate_at=0.7, zebra_mb=32");
    }
}
