//! The second level of QMD's index: **address blocks** on flash, and the **address root**
//! in the metadata journal (the paper's NVRAM) that says where they are.
//!
//! Each mirror's disk addresses are cut into fixed spans; the index entries that start in a
//! span are one address block (a header, the entries sorted by disk address, a CRC32C).
//! A flush writes the blocks of the spans that changed since the last flush to fresh flash
//! space, makes them durable, and only then journals their root entries (span → flash
//! address, length, generation, checksum): the journal grows per changed span and flush,
//! not per buffered write. A root entry points either at flash or, when the flash cannot
//! take the block (full, failed, rebuilding), holds the block itself inline.

use super::index::Entry;
use crate::journal::format::crc32c;
use crate::layout::pair_striped::Reader;

const BLOCK_MAGIC: u32 = 0x4244_4d51; // "QMDB"
const HEADER: usize = 4 + 4 + 8 + 8 + 4 + 4;
const ENTRY: usize = 8 + 8 + 8 + 1;
/// Blocks are written in whole sectors.
pub const BLOCK_ALIGN: u64 = 512;

/// A span of one mirror: (pair, span number).
pub type SpanKey = (usize, u64);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// The block is on the flash member at this offset, this many bytes (padded).
    Flash { off: u64, len: u64 },
    /// The block itself, in the journal (the flash could not take it).
    Inline(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootEntry {
    pub generation: u64,
    pub crc: u32,
    pub place: Place,
}

fn header(key: SpanKey, generation: u64, count: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER);
    h.extend(BLOCK_MAGIC.to_le_bytes());
    h.extend((key.0 as u32).to_le_bytes());
    h.extend(key.1.to_le_bytes());
    h.extend(generation.to_le_bytes());
    h.extend(count.to_le_bytes());
    h
}

/// The block of `entries` (home, entry), padded to whole sectors, and its checksum.
pub fn encode(key: SpanKey, generation: u64, entries: &[(u64, Entry)]) -> (Vec<u8>, u32) {
    let mut body = Vec::with_capacity(entries.len() * ENTRY);
    for (home, e) in entries {
        body.extend(home.to_le_bytes());
        body.extend(e.len.to_le_bytes());
        body.extend(e.flash_off.to_le_bytes());
        body.push(u8::from(e.sole));
    }
    let mut block = header(key, generation, entries.len() as u32);
    let crc = crc32c(&[&block[..], &body[..]].concat());
    block.extend(crc.to_le_bytes());
    block.extend(body);
    let padded = (block.len() as u64).div_ceil(BLOCK_ALIGN) * BLOCK_ALIGN;
    block.resize(padded as usize, 0);
    (block, crc)
}

/// Where the entries of a decoded block may lie: home bytes `home_start..home_end` (the
/// span, cut at the member's end) and flash bytes below `flash_end`.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub home_start: u64,
    pub home_end: u64,
    pub flash_end: u64,
}

/// The entries of the block `bytes` that `root` says span `key` holds. A torn block (bad
/// checksum), a stale one (another generation, another span) or entries out of bounds or
/// overlapping are errors: the caller recovers the span from the active disk.
pub fn decode(
    bytes: &[u8],
    key: SpanKey,
    root: &RootEntry,
    bounds: Bounds,
) -> Result<Vec<(u64, Entry)>, String> {
    let mut rd = Reader::new(bytes, "qmd address block");
    let (magic, pair, span) = (rd.u32()?, rd.u32()? as usize, rd.u64()?);
    let (generation, count, crc) = (rd.u64()?, rd.u32()?, rd.u32()?);
    if magic != BLOCK_MAGIC {
        return Err("not an address block (torn or overwritten)".into());
    }
    if (pair, span) != key || generation != root.generation {
        return Err(format!(
            "stale address block: pair {pair} span {span} generation {generation}, the root \
             wants pair {} span {} generation {}",
            key.0, key.1, root.generation
        ));
    }
    let body_len = (count as usize)
        .checked_mul(ENTRY)
        .filter(|&n| n <= rd.rest.len())
        .ok_or_else(|| format!("address block of {count} entries is truncated"))?;
    let body = &rd.rest[..body_len];
    let computed = crc32c(&[&header(key, generation, count)[..], body].concat());
    if computed != crc || crc != root.crc {
        return Err(format!(
            "address block checksum {computed:#010x} (stored {crc:#010x}, root {:#010x})",
            root.crc
        ));
    }
    let mut rd = Reader::new(body, "qmd address block");
    let mut out: Vec<(u64, Entry)> = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (home, len, flash_off) = (rd.u64()?, rd.u64()?, rd.u64()?);
        let sole = match rd.u8()? {
            0 => false,
            1 => true,
            other => return Err(format!("address block entry flag {other}")),
        };
        let in_span = home >= bounds.home_start && home < bounds.home_end;
        let fits = |start: u64, end: u64| start.checked_add(len).is_some_and(|e| e <= end);
        let after_previous = out.last().is_none_or(|(h, e)| h + e.len <= home);
        if len == 0
            || !in_span
            || !fits(home, u64::MAX)
            || !fits(flash_off, bounds.flash_end)
            || !after_previous
        {
            return Err(format!(
                "address block entry home {home}+{len} at flash {flash_off} is out of bounds"
            ));
        }
        out.push((
            home,
            Entry {
                len,
                flash_off,
                sole,
            },
        ));
    }
    Ok(out)
}

/// A root record: span `key` now has block `entry` (None: the span holds no entries).
pub fn root_payload(key: SpanKey, entry: Option<&RootEntry>) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend((key.0 as u32).to_le_bytes());
    p.extend(key.1.to_le_bytes());
    match entry {
        None => p.push(0),
        Some(e) => {
            p.push(match e.place {
                Place::Flash { .. } => 1,
                Place::Inline(_) => 2,
            });
            p.extend(e.generation.to_le_bytes());
            p.extend(e.crc.to_le_bytes());
            match &e.place {
                Place::Flash { off, len } => {
                    p.extend(off.to_le_bytes());
                    p.extend(len.to_le_bytes());
                }
                Place::Inline(bytes) => p.extend(bytes),
            }
        }
    }
    p
}

/// Parse a root record; `max_block` bounds a flash block's length.
pub fn parse_root(payload: &[u8], max_block: u64) -> Result<(SpanKey, Option<RootEntry>), String> {
    let mut rd = Reader::new(payload, "qmd address root");
    let key = (rd.u32()? as usize, rd.u64()?);
    let kind = rd.u8()?;
    if kind == 0 {
        return Ok((key, None));
    }
    let (generation, crc) = (rd.u64()?, rd.u32()?);
    let place = match kind {
        1 => {
            let (off, len) = (rd.u64()?, rd.u64()?);
            if len < HEADER as u64 || len > max_block || off.checked_add(len).is_none() {
                return Err(format!(
                    "qmd address root names a block of {len} bytes at flash {off}"
                ));
            }
            Place::Flash { off, len }
        }
        2 => Place::Inline(rd.rest.to_vec()),
        other => return Err(format!("qmd address root of kind {other}")),
    };
    Ok((
        key,
        Some(RootEntry {
            generation,
            crc,
            place,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(len: u64, flash_off: u64, sole: bool) -> Entry {
        Entry {
            len,
            flash_off,
            sole,
        }
    }

    const BOUNDS: Bounds = Bounds {
        home_start: 4096,
        home_end: 8192,
        flash_end: 1 << 20,
    };

    #[test]
    fn a_block_round_trips_and_torn_or_stale_blocks_are_detected() {
        let entries = vec![(4096, e(512, 0, false)), (5000, e(100, 512, true))];
        let key = (1, 1);
        let (block, crc) = encode(key, 7, &entries);
        assert_eq!(block.len() as u64 % BLOCK_ALIGN, 0);
        let root = RootEntry {
            generation: 7,
            crc,
            place: Place::Flash {
                off: 0,
                len: block.len() as u64,
            },
        };
        assert_eq!(decode(&block, key, &root, BOUNDS).unwrap(), entries);
        // Torn: a byte of the body changed, or only the first sector landed.
        let mut torn = block.clone();
        torn[HEADER + 3] ^= 1;
        assert!(decode(&torn, key, &root, BOUNDS).is_err());
        assert!(decode(&vec![0; block.len()], key, &root, BOUNDS).is_err());
        // Stale: an older generation of the span, or another span's block.
        let (old, old_crc) = encode(key, 6, &entries[..1]);
        assert!(decode(&old, key, &root, BOUNDS)
            .unwrap_err()
            .contains("stale"));
        let stale_root = RootEntry {
            generation: 6,
            crc: old_crc,
            ..root.clone()
        };
        assert!(decode(&old, key, &stale_root, BOUNDS).is_ok());
        assert!(decode(&block, (0, 1), &root, BOUNDS).is_err());
        // Entries out of the span, overlapping or empty are refused even with a good CRC.
        for bad in [
            vec![(0, e(8, 0, false))],
            vec![(4096, e(0, 0, false))],
            vec![(4096, e(100, 0, false)), (4100, e(8, 0, false))],
            vec![(4096, e(8, u64::MAX - 2, false))],
        ] {
            let (b, c) = encode(key, 7, &bad);
            let r = RootEntry {
                crc: c,
                ..root.clone()
            };
            assert!(decode(&b, key, &r, BOUNDS).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn root_records_round_trip_and_hostile_ones_are_refused() {
        let flash = RootEntry {
            generation: 3,
            crc: 9,
            place: Place::Flash {
                off: 4096,
                len: 512,
            },
        };
        let inline = RootEntry {
            generation: 4,
            crc: 10,
            place: Place::Inline(vec![1, 2, 3]),
        };
        for entry in [None, Some(&flash), Some(&inline)] {
            let p = root_payload((2, 5), entry);
            assert_eq!(parse_root(&p, 4096).unwrap(), ((2, 5), entry.cloned()));
        }
        let huge = RootEntry {
            place: Place::Flash {
                off: u64::MAX,
                len: 512,
            },
            ..flash.clone()
        };
        assert!(parse_root(&root_payload((0, 0), Some(&huge)), 4096).is_err());
        let big = RootEntry {
            place: Place::Flash { off: 0, len: 8192 },
            ..flash
        };
        assert!(parse_root(&root_payload((0, 0), Some(&big)), 4096).is_err());
        assert!(parse_root(&[1, 2], 4096).is_err());
        let mut odd = root_payload((0, 0), None);
        odd[12] = 9;
        odd.extend([0; 12]);
        assert!(parse_root(&odd, 4096).is_err());
    }
}
