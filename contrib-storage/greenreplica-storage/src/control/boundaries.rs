//! The `boundaries` op: a volume's alignment boundaries inside a range (where a member I/O
//! is cut: chunk ends, member track ends on the track-aligned layouts), for software that
//! plans its runs around them (the extension's prefetch and write-back). Read-only, so any
//! connected peer may ask, as for `status`; the range and the answer are bounded.

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::layout::Personality;

/// The longest range one request may ask about (planning it is proportional to its cuts,
/// and to the range for layouts with few).
pub const MAX_RANGE_BYTES: u64 = 16 << 30;
/// The most boundaries one answer carries (and the default): ~21 bytes each in JSON keeps
/// the reply under the extension's 256 KiB.
pub const MAX_BOUNDARIES: usize = 8192;

/// The reply for volume `name` (laid out by `layout`) and bytes `offset..offset+len`.
pub fn reply(
    name: &str,
    layout: &dyn Personality,
    offset: u64,
    len: u64,
    max: Option<usize>,
) -> Result<Value> {
    if len == 0 || len > MAX_RANGE_BYTES {
        bail!("range length {len} must be between 1 and {MAX_RANGE_BYTES} bytes");
    }
    let cap = match max {
        Some(0) => bail!("max must be at least 1"),
        Some(m) => m.min(MAX_BOUNDARIES),
        None => MAX_BOUNDARIES,
    };
    let Some(found) = layout.alignment_boundaries(offset, len, cap) else {
        return Ok(json!({
            "ok": true, "volume": name, "layout": layout.kind().name(),
            "aligned": false, "boundaries": [], "complete_to": offset + len,
        }));
    };
    let found = found?;
    Ok(json!({
        "ok": true, "volume": name, "layout": layout.kind().name(),
        "aligned": true, "boundaries": found.offsets, "complete_to": found.complete_to,
        "truncated": found.complete_to < offset + len,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{build, LayoutKind};

    const MIB: u64 = 1 << 20;

    #[test]
    fn answers_chunk_ends_and_says_when_the_layout_has_none() {
        let raid5 = build(LayoutKind::RAID5, 3, 64 * MIB, 65536).unwrap();
        let r = reply("v", raid5.as_ref(), 0, 200_000, None).unwrap();
        assert_eq!(r["aligned"], true);
        assert_eq!(r["boundaries"], json!([65536, 131072, 196608]));
        assert_eq!(r["truncated"], false);
        let single = build(LayoutKind::SINGLE, 1, 64 * MIB, 65536).unwrap();
        let r = reply("v", single.as_ref(), 0, 200_000, None).unwrap();
        assert_eq!(r["aligned"], false);
        assert_eq!(r["boundaries"], json!([]));
    }

    #[test]
    fn refuses_hostile_ranges_and_caps_the_answer() {
        let raid5 = build(LayoutKind::RAID5, 3, 64 * MIB, 65536).unwrap();
        let l = raid5.as_ref();
        assert!(reply("v", l, 0, 0, None).is_err(), "empty range");
        assert!(
            reply("v", l, 0, MAX_RANGE_BYTES + 1, None).is_err(),
            "too long"
        );
        assert!(reply("v", l, u64::MAX - 1, 2, None).is_err(), "overflow");
        assert!(
            reply("v", l, 128 * MIB - 1, 2, None).is_err(),
            "past the end"
        );
        assert!(reply("v", l, 0, MIB, Some(0)).is_err(), "max 0");
        let r = reply("v", l, 0, 64 * MIB, Some(usize::MAX)).unwrap();
        assert_eq!(r["boundaries"].as_array().map(Vec::len), Some(1023));
        let r = reply("v", l, 0, 64 * MIB, Some(5)).unwrap();
        assert_eq!(r["boundaries"].as_array().map(Vec::len), Some(5));
        assert_eq!(r["truncated"], true);
        assert_eq!(r["complete_to"], 6 * 65536);
    }

    #[test]
    fn raid5_tracks_answers_member_track_ends() {
        let l = build(LayoutKind::RAID5_TRACKS, 3, 64 * MIB, 65536).unwrap();
        let r = reply("v", l.as_ref(), 0, 4 * MIB, None).unwrap();
        assert_eq!(r["layout"], "raid5-tracks");
        let b = r["boundaries"].as_array().cloned().unwrap_or_default();
        assert!(b.len() > 4, "a few hundred KB per stripe: {b:?}");
        // Not a fixed chunk: the tracks of the members differ.
        let gaps: Vec<u64> = b
            .windows(2)
            .map(|w| w[1].as_u64().unwrap_or(0) - w[0].as_u64().unwrap_or(0))
            .collect();
        assert!(gaps.iter().any(|&g| g != gaps[0]), "{gaps:?}");
    }
}
