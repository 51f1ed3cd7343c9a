//! A member's boundary list kept in its own metadata area (between the member header and
//! the data), in TrackMap's run-length form with a checksum, so it is found once and read
//! back at every assembly. What is read is never trusted: the magic, the version, the run
//! count, every run and the total are checked before anything is expanded, and the
//! checksum before any of it is used. Sizes are counted in the list's own sectors against the
//! member's bytes, and only the tracks under the data a volume uses are expanded.

use anyhow::{bail, Context, Result};

use super::map::{TrackMap, TrackRunLength};
use super::WINDOW;
use crate::journal::format::crc32c;
use crate::member::Member;
use crate::superblock::DATA_OFFSET;

/// Where the list starts in the member (after the 4 KiB member header, before the data).
pub const STORED_AT: u64 = 64 << 10;
const MAGIC: &[u8; 8] = b"GRTRACKS";
const VERSION: u32 = 1;
/// magic, version, sector bytes, runs, total sectors, checksum.
const HEAD: usize = 8 + 4 + 4 + 4 + 8 + 4;
const RUN: usize = 16;
/// Runs that fit the metadata area.
pub const MAX_RUNS: usize = ((DATA_OFFSET - STORED_AT) as usize - HEAD) / RUN;

/// The bytes stored for `map` (tracks in sectors of `sector_bytes`).
pub fn encode(map: &TrackMap, sector_bytes: u32) -> Result<Vec<u8>> {
    let runs = map.run_lengths();
    if runs.len() > MAX_RUNS {
        bail!(
            "the boundary list has {} runs of equal track sizes; a member's metadata area holds {MAX_RUNS}",
            runs.len()
        );
    }
    let mut out = Vec::with_capacity(HEAD + runs.len() * RUN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&sector_bytes.to_le_bytes());
    out.extend_from_slice(&(runs.len() as u32).to_le_bytes());
    out.extend_from_slice(&map.sectors().to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    for r in &runs {
        out.extend_from_slice(&r.size.to_le_bytes());
        out.extend_from_slice(&r.count.to_le_bytes());
    }
    let crc = crc32c(&out);
    out[HEAD - 4..HEAD].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// The list back from its bytes (`Ok(None)`: none stored), for a member of `member_bytes`:
/// a list that describes more than the member holds (counted in the list's own sectors) is
/// refused.
pub fn decode(bytes: &[u8], member_bytes: u64) -> Result<Option<(TrackMap, u32)>> {
    decode_within(bytes, member_bytes, u64::MAX)
}

/// As [`decode`], expanding only the tracks that start below `used_bytes` (the data a
/// volume uses): a list is kept as runs but used as one boundary per track, so what is
/// expanded is bounded by the data used, not by what the runs claim.
pub fn decode_within(
    bytes: &[u8],
    member_bytes: u64,
    used_bytes: u64,
) -> Result<Option<(TrackMap, u32)>> {
    if bytes.len() < HEAD || bytes[..8] != MAGIC[..] {
        return Ok(None);
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        bail!("stored boundary list has version {version}; this agent reads {VERSION}");
    }
    let sector_bytes = u32_at(bytes, 12);
    if !(512..=65536).contains(&sector_bytes) || !sector_bytes.is_power_of_two() {
        bail!("stored boundary list has a sector size of {sector_bytes} bytes");
    }
    let device_sectors = member_bytes / u64::from(sector_bytes);
    let runs = u32_at(bytes, 16) as usize;
    if runs == 0 || runs > MAX_RUNS {
        bail!("stored boundary list claims {runs} runs (1 to {MAX_RUNS} fit)");
    }
    let end = HEAD + runs * RUN;
    if bytes.len() < end {
        bail!("stored boundary list is cut short");
    }
    let stored_crc = u32_at(bytes, HEAD - 4);
    let mut copy = bytes[..end].to_vec();
    copy[HEAD - 4..HEAD].fill(0);
    if crc32c(&copy) != stored_crc {
        bail!("stored boundary list fails its checksum");
    }
    let total = u64_at(bytes, 20);
    let mut sum: u64 = 0;
    let mut list = Vec::with_capacity(runs);
    for i in 0..runs {
        let at = HEAD + i * RUN;
        let r = TrackRunLength {
            size: u64_at(bytes, at),
            count: u64_at(bytes, at + 8),
        };
        // Extraction never finds a track shorter than its window; this also bounds the
        // number of tracks expanded below to the member's size / WINDOW.
        if r.size < WINDOW || r.count == 0 {
            bail!(
                "stored boundary list run {i} has tracks of {} sectors, {} times",
                r.size,
                r.count
            );
        }
        sum = r
            .size
            .checked_mul(r.count)
            .and_then(|n| sum.checked_add(n))
            .filter(|&s| s <= device_sectors)
            .with_context(|| {
                format!("stored boundary list runs past the member's {device_sectors} sectors")
            })?;
        list.push(r);
    }
    if sum != total {
        bail!("stored boundary list covers {sum} sectors but says {total}");
    }
    // Only the tracks that start below the data used (at least the first).
    let used = (used_bytes / u64::from(sector_bytes)).max(1);
    let mut at = 0u64;
    let mut kept = Vec::with_capacity(list.len());
    for r in list {
        if at >= used {
            break;
        }
        let count = r.count.min((used - at).div_ceil(r.size));
        at += count * r.size;
        kept.push(TrackRunLength { count, ..r });
    }
    Ok(Some((TrackMap::from_run_lengths(&kept)?, sector_bytes)))
}

/// The metadata-area bytes of a map in bytes (a layout's), in 512-byte sectors: what a
/// replacement keeps so that it is reassembled with the tracks its data was placed by.
pub fn metadata_of(map: &TrackMap) -> Vec<(u64, Vec<u8>)> {
    let sectors = (1..map.tracks())
        .map(|i| map.start(i) / 512)
        .collect::<Vec<_>>();
    TrackMap::new(&sectors, map.sectors() / 512)
        .and_then(|m| encode(&m, 512))
        .map(|bytes| vec![(STORED_AT, bytes)])
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot encode a member's boundary list");
            Vec::new()
        })
}

/// Keep `map` in `member`'s metadata area.
pub fn store(member: &dyn Member, map: &TrackMap, sector_bytes: u32) -> Result<()> {
    let bytes = encode(map, sector_bytes)?;
    member
        .write_at(&bytes, STORED_AT)
        .and_then(|()| member.flush())
        .with_context(|| format!("{}: cannot store its boundary list", member.describe()))
}

/// The boundary list kept in `member`'s metadata area, if any; an invalid one is an error.
pub fn load(member: &dyn Member) -> Result<Option<(TrackMap, u32)>> {
    load_within(member, u64::MAX)
}

/// As [`load`], the tracks starting below `used_bytes` of data only.
pub fn load_within(member: &dyn Member, used_bytes: u64) -> Result<Option<(TrackMap, u32)>> {
    let name = member.describe();
    let area = (DATA_OFFSET - STORED_AT) as usize;
    if member.size() < DATA_OFFSET {
        return Ok(None);
    }
    let mut bytes = vec![0u8; area];
    member
        .read_at(&mut bytes, STORED_AT)
        .with_context(|| format!("{name}: cannot read its boundary list"))?;
    decode_within(&bytes, member.size(), used_bytes).with_context(|| format!("member {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::memory::MemMember;

    fn sample() -> TrackMap {
        // Three zones' worth of sizes with a defect-shortened track between them.
        let mut b = Vec::new();
        let mut at = 0;
        for size in [1196, 1196, 1196, 1100, 1196, 1025, 1025] {
            at += size;
            b.push(at);
        }
        let end = b.pop().unwrap();
        TrackMap::new(&b, end).unwrap()
    }

    #[test]
    fn a_stored_list_round_trips_through_a_member() {
        let m = MemMember::new(4 << 20);
        assert!(load(m.as_ref()).unwrap().is_none(), "nothing stored yet");
        store(m.as_ref(), &sample(), 512).unwrap();
        let (back, sector) = load(m.as_ref()).unwrap().unwrap();
        assert_eq!(back, sample());
        assert_eq!(sector, 512);
    }

    #[test]
    fn a_corrupt_list_is_refused_with_a_clear_error() {
        let good = encode(&sample(), 512).unwrap();
        for at in [8, 12, 16, 20, HEAD - 2, HEAD + 3, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            let err = format!("{:#}", decode(&bad, 512 << 30).unwrap_err());
            assert!(err.contains("stored boundary list"), "byte {at}: {err}");
        }
        let err = format!(
            "{:#}",
            decode(&good[..good.len() - 3], 512 << 30).unwrap_err()
        );
        assert!(err.contains("cut short"), "{err}");
    }

    /// A list forged with a valid checksum is still bounded before it is expanded.
    #[test]
    fn a_hostile_list_with_a_good_checksum_is_refused() {
        let forge = |runs: &[(u64, u64)], total: u64, claimed: u32| {
            let mut out = Vec::new();
            out.extend_from_slice(MAGIC);
            out.extend_from_slice(&VERSION.to_le_bytes());
            out.extend_from_slice(&512u32.to_le_bytes());
            out.extend_from_slice(&claimed.to_le_bytes());
            out.extend_from_slice(&total.to_le_bytes());
            out.extend_from_slice(&[0; 4]);
            for &(s, c) in runs {
                out.extend_from_slice(&s.to_le_bytes());
                out.extend_from_slice(&c.to_le_bytes());
            }
            let crc = crc32c(&out);
            out[HEAD - 4..HEAD].copy_from_slice(&crc.to_le_bytes());
            out.resize(out.len() + 64, 0);
            decode(&out, 512 << 20).map(|o| o.map(|(m, _)| m.tracks()))
        };
        // Billions of one-sector tracks (would exhaust memory if expanded).
        assert!(forge(&[(1, 1 << 40)], 1 << 40, 1).is_err());
        // Tracks beyond the member.
        assert!(forge(&[(1000, 1 << 20)], 1000 << 20, 1).is_err());
        // Overflow.
        assert!(forge(&[(u64::MAX / 2, 3)], 0, 1).is_err());
        // More runs claimed than fit, or none.
        assert!(forge(&[(1000, 2)], 2000, MAX_RUNS as u32 + 1).is_err());
        assert!(forge(&[], 0, 0).is_err());
        // A total that disagrees with the runs.
        assert!(forge(&[(1000, 2)], 3000, 1).is_err());
        // The honest version of the same list is accepted.
        assert_eq!(forge(&[(1000, 2)], 2000, 1).unwrap(), Some(2));
    }

    /// A forged list in 4 KiB sectors that fills the member counted in 512-byte sectors
    /// describes eight times the member, and expands to a boundary per 64 sectors of all
    /// of it; its sectors are counted in its own unit, and the expansion stops at the data
    /// the volume uses.
    #[test]
    fn a_forged_list_stays_inside_the_member_and_the_data_used() {
        let member_bytes: u64 = 1 << 30;
        let forge = |sector: u32, runs: &[(u64, u64)]| {
            let mut out = Vec::new();
            out.extend_from_slice(MAGIC);
            out.extend_from_slice(&VERSION.to_le_bytes());
            out.extend_from_slice(&sector.to_le_bytes());
            out.extend_from_slice(&(runs.len() as u32).to_le_bytes());
            let total: u64 = runs.iter().map(|&(s, c)| s * c).sum();
            out.extend_from_slice(&total.to_le_bytes());
            out.extend_from_slice(&[0; 4]);
            for &(s, c) in runs {
                out.extend_from_slice(&s.to_le_bytes());
                out.extend_from_slice(&c.to_le_bytes());
            }
            let crc = crc32c(&out);
            out[HEAD - 4..HEAD].copy_from_slice(&crc.to_le_bytes());
            out
        };
        // 2^21 sectors of 512 bytes are the member; as 4 KiB sectors they are 8 GiB.
        let bytes = forge(4096, &[(WINDOW, (member_bytes / 512) / WINDOW)]);
        let err = format!(
            "{:#}",
            decode_within(&bytes, member_bytes, member_bytes).unwrap_err()
        );
        assert!(err.contains("past the member"), "{err}");
        // An honest list of the whole member expands only as far as the data used.
        let bytes = forge(512, &[(WINDOW, (member_bytes / 512) / WINDOW)]);
        let used = 1 << 20;
        let (map, _) = decode_within(&bytes, member_bytes, used).unwrap().unwrap();
        assert_eq!(map.sectors(), used / 512);
        assert_eq!(map.tracks() as u64, used / 512 / WINDOW);
        // And never below one track: a first track longer than the data is kept whole.
        let bytes = forge(512, &[(4096, 2)]);
        let (map, _) = decode_within(&bytes, member_bytes, 4096).unwrap().unwrap();
        assert_eq!(map.tracks(), 1);
    }
}
