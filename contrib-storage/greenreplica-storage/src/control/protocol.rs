//! Request shapes of the control protocol. The extension (C) speaks this, so shapes only
//! ever grow. Every reply is an object with `"ok"`; failures carry `"error"`, declined
//! sleeps carry `"declined": true` and `"reason"`.

use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Status,
    Volumes,
    Volume {
        volume: String,
    },
    Wake {
        volume: String,
        /// The extents the client will read next: a policy that allows it (cooperative)
        /// spins up only the members that hold them.
        #[serde(default)]
        extents: Option<Vec<(u64, u64)>>,
        /// The window only writes those extents (a batch's write-back): a layout that can
        /// buffer the writes in flash (QMD) leaves the disks that would hold them asleep.
        #[serde(default)]
        writes_only: bool,
    },
    Sleep {
        volume: String,
        expected_idle_s: Option<f64>,
    },
    Hint {
        volume: String,
        extents: Vec<(u64, u64)>,
    },
    FailMember {
        volume: String,
        member: usize,
    },
    ReplaceMember {
        volume: String,
        member: usize,
        /// A new backing file or device; default: the member's configured path, recreated.
        path: Option<String>,
    },
    Metrics,
    CreateVolume {
        name: String,
        template: String,
        directory: String,
    },
    RemoveVolume {
        name: String,
    },
    /// Compare every copy of the volume; repair (the default) rewrites the ones that differ.
    Scrub {
        volume: String,
        repair: Option<bool>,
    },
    /// Whether reading volume bytes `offset..offset+len` needs a sleeping member (QMD).
    RangeAsleep {
        volume: String,
        offset: u64,
        len: u64,
    },
    /// Mark volume extents hot, cold or normal (QMD's partial on-line mirrors; journaled).
    SetTemperature {
        volume: String,
        extents: Vec<(u64, u64)>,
        temperature: String,
    },
    /// The volume's alignment boundaries inside `offset..offset+len` (chunk ends; member
    /// track ends on the track-aligned layouts), at most `max` (and at most 8192).
    Boundaries {
        volume: String,
        offset: u64,
        len: u64,
        #[serde(default)]
        max: Option<usize>,
    },
    /// Release every extent a volume no longer assembled holds in flash pool `flash` (root
    /// only; its buffered writes are lost: the operator's decision, never automatic).
    ReleaseFlash {
        flash: String,
        volume: String,
    },
}

pub const OPS: &[&str] = &[
    "status",
    "volumes",
    "volume",
    "wake",
    "sleep",
    "hint",
    "fail_member",
    "replace_member",
    "metrics",
    "create_volume",
    "remove_volume",
    "scrub",
    "range_asleep",
    "set_temperature",
    "boundaries",
    "release_flash",
];

/// Parse one line, telling malformed JSON, unknown ops and bad arguments apart.
pub fn parse(line: &str) -> Result<Request, String> {
    let value: Value =
        serde_json::from_str(line).map_err(|e| format!("malformed request (not JSON): {e}"))?;
    let op = match value.get("op") {
        Some(Value::String(op)) => op.clone(),
        Some(_) => return Err("malformed request: \"op\" must be a string".into()),
        None if value.is_object() => return Err("malformed request: missing \"op\"".into()),
        None => return Err("malformed request: expected a JSON object".into()),
    };
    if !OPS.contains(&op.as_str()) {
        return Err(format!("unknown op {op:?} (known: {})", OPS.join(", ")));
    }
    serde_json::from_value(value).map_err(|e| format!("bad arguments for op {op:?}: {e}"))
}

pub fn error(message: impl std::fmt::Display) -> Value {
    json!({"ok": false, "error": message.to_string()})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_documented_shapes() {
        assert_eq!(parse(r#"{"op":"status"}"#), Ok(Request::Status));
        assert_eq!(
            parse(r#"{"op":"sleep","volume":"v","expected_idle_s":600}"#),
            Ok(Request::Sleep {
                volume: "v".into(),
                expected_idle_s: Some(600.0)
            })
        );
        assert_eq!(
            parse(r#"{"op":"hint","volume":"v","extents":[[0,8192],[65536,4096]]}"#),
            Ok(Request::Hint {
                volume: "v".into(),
                extents: vec![(0, 8192), (65536, 4096)]
            })
        );
        assert_eq!(
            parse(r#"{"op":"fail_member","volume":"v","member":1,"extra":true}"#),
            Ok(Request::FailMember {
                volume: "v".into(),
                member: 1
            }),
            "unknown fields are tolerated so clients can add them"
        );
        assert_eq!(
            parse(r#"{"op":"wake","volume":"v"}"#),
            Ok(Request::Wake {
                volume: "v".into(),
                extents: None,
                writes_only: false
            })
        );
        assert_eq!(
            parse(r#"{"op":"wake","volume":"v","extents":[[0,8192]]}"#),
            Ok(Request::Wake {
                volume: "v".into(),
                extents: Some(vec![(0, 8192)]),
                writes_only: false
            })
        );
        assert_eq!(
            parse(r#"{"op":"wake","volume":"v","extents":[[0,8192]],"writes_only":true}"#),
            Ok(Request::Wake {
                volume: "v".into(),
                extents: Some(vec![(0, 8192)]),
                writes_only: true
            })
        );
        assert!(parse(r#"{"op":"wake","volume":"v","writes_only":"yes"}"#).is_err());
        assert!(parse(r#"{"op":"wake","volume":"v","extents":[[-1,2]]}"#).is_err());
        assert_eq!(
            parse(r#"{"op":"range_asleep","volume":"v","offset":0,"len":8192}"#),
            Ok(Request::RangeAsleep {
                volume: "v".into(),
                offset: 0,
                len: 8192
            })
        );
        assert!(parse(r#"{"op":"range_asleep","volume":"v","offset":-1,"len":1}"#).is_err());
        assert!(parse(r#"{"op":"range_asleep","volume":"v","offset":0}"#).is_err());
        assert_eq!(
            parse(
                r#"{"op":"set_temperature","volume":"v","extents":[[0,8192]],"temperature":"cold"}"#
            ),
            Ok(Request::SetTemperature {
                volume: "v".into(),
                extents: vec![(0, 8192)],
                temperature: "cold".into()
            })
        );
        assert!(parse(r#"{"op":"set_temperature","volume":"v","extents":[[0,1]]}"#).is_err());
        assert!(parse(
            r#"{"op":"set_temperature","volume":"v","extents":[[0,-1]],"temperature":"hot"}"#
        )
        .is_err());
        assert_eq!(
            parse(r#"{"op":"boundaries","volume":"v","offset":0,"len":8192}"#),
            Ok(Request::Boundaries {
                volume: "v".into(),
                offset: 0,
                len: 8192,
                max: None
            })
        );
        assert!(parse(r#"{"op":"boundaries","volume":"v","offset":-1,"len":1}"#).is_err());
        assert!(parse(r#"{"op":"boundaries","volume":"v","offset":0,"len":1,"max":-2}"#).is_err());
        assert_eq!(
            parse(r#"{"op":"scrub","volume":"v"}"#),
            Ok(Request::Scrub {
                volume: "v".into(),
                repair: None
            })
        );
    }

    #[test]
    fn tells_malformed_unknown_and_bad_arguments_apart() {
        assert!(parse("{not json")
            .unwrap_err()
            .starts_with("malformed request"));
        assert!(parse("[1,2]")
            .unwrap_err()
            .contains("expected a JSON object"));
        assert!(parse(r#"{"op":"explode"}"#)
            .unwrap_err()
            .starts_with("unknown op \"explode\""));
        assert!(parse(r#"{"op":"wake"}"#)
            .unwrap_err()
            .contains("bad arguments for op \"wake\""));
    }
}
