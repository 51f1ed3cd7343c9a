//! On-disk format of the journal: CRC32C, the log header, record headers, the checkpoint
//! header, and the scan of a log that tells a torn tail from damage in the middle.
//!
//! All integers are little-endian. Every header carries a CRC32C of its own bytes, so a
//! damaged length field is caught before it is believed.
//!
//! ```text
//! log file   "GRJLOG01" generation:u64 first_seq:u64 reserved:u32 header_crc:u32   (32 B)
//!            then records, back to back
//! record     "GRJR" kind:u16 flags:u16 len:u32 payload_crc:u32
//!            seq:u64 batch:u64 reserved:u32 header_crc:u32                           (40 B)
//!            then `len` payload bytes
//! checkpoint "GRJCKP01" generation:u64 last_seq:u64 len:u64 payload_crc:u32
//!            reserved:u32×2 header_crc:u32                                            (48 B)
//!            then `len` snapshot bytes
//! ```
//!
//! `batch` is the sequence number of the first record of the commit (one write and one
//! fdatasync) the record was part of. A commit starts only after the previous one's
//! fdatasync returned, so a valid record of a *later* batch after a damaged spot proves the
//! damaged bytes had been made durable: that is corruption, not a torn write.

pub const LOG_MAGIC: &[u8; 8] = b"GRJLOG01";
pub const LOG_HEADER: usize = 32;
pub const RECORD_MAGIC: &[u8; 4] = b"GRJR";
pub const RECORD_HEADER: usize = 40;
pub const CHECKPOINT_MAGIC: &[u8; 8] = b"GRJCKP01";
pub const CHECKPOINT_HEADER: usize = 48;

const fn crc32c_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut b = 0;
        while b < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
            b += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC32C: [u32; 256] = crc32c_table();

/// CRC-32C (Castagnoli), the checksum ext4, btrfs and iSCSI use for metadata.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_continue(0, data)
}

/// CRC-32C of the concatenation of what gave `crc` and `data`.
pub fn crc32c_continue(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    for &b in data {
        c = CRC32C[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// A record header's checksum covers its first 36 bytes and the log's generation, so a
/// record left in a reused block by an older log never passes for one of this log.
fn record_header_crc(h: &[u8], generation: u64) -> u32 {
    crc32c_continue(crc32c(&h[..36]), &generation.to_le_bytes())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The header of a log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogHeader {
    pub generation: u64,
    pub first_seq: u64,
}

impl LogHeader {
    pub fn encode(&self) -> [u8; LOG_HEADER] {
        let mut h = [0u8; LOG_HEADER];
        h[..8].copy_from_slice(LOG_MAGIC);
        h[8..16].copy_from_slice(&self.generation.to_le_bytes());
        h[16..24].copy_from_slice(&self.first_seq.to_le_bytes());
        let crc = crc32c(&h[..28]);
        h[28..].copy_from_slice(&crc.to_le_bytes());
        h
    }

    pub fn decode(b: &[u8]) -> Result<Self, String> {
        if b.len() < LOG_HEADER {
            return Err(format!("log header is {} bytes, not {LOG_HEADER}", b.len()));
        }
        if &b[..8] != LOG_MAGIC {
            return Err("not a journal log (bad magic)".into());
        }
        if u32_at(b, 28) != crc32c(&b[..28]) {
            return Err("log header checksum mismatch".into());
        }
        Ok(Self {
            generation: u64_at(b, 8),
            first_seq: u64_at(b, 16),
        })
    }
}

/// The header of a checkpoint file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointHeader {
    pub generation: u64,
    pub last_seq: u64,
    pub len: u64,
    pub payload_crc: u32,
}

impl CheckpointHeader {
    pub fn encode(&self) -> [u8; CHECKPOINT_HEADER] {
        let mut h = [0u8; CHECKPOINT_HEADER];
        h[..8].copy_from_slice(CHECKPOINT_MAGIC);
        h[8..16].copy_from_slice(&self.generation.to_le_bytes());
        h[16..24].copy_from_slice(&self.last_seq.to_le_bytes());
        h[24..32].copy_from_slice(&self.len.to_le_bytes());
        h[32..36].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32c(&h[..44]);
        h[44..].copy_from_slice(&crc.to_le_bytes());
        h
    }

    pub fn decode(b: &[u8]) -> Result<Self, String> {
        if b.len() < CHECKPOINT_HEADER {
            return Err(format!(
                "checkpoint header is {} bytes, not {CHECKPOINT_HEADER}",
                b.len()
            ));
        }
        if &b[..8] != CHECKPOINT_MAGIC {
            return Err("not a journal checkpoint (bad magic)".into());
        }
        if u32_at(b, 44) != crc32c(&b[..44]) {
            return Err("checkpoint header checksum mismatch".into());
        }
        Ok(Self {
            generation: u64_at(b, 8),
            last_seq: u64_at(b, 16),
            len: u64_at(b, 24),
            payload_crc: u32_at(b, 32),
        })
    }
}

/// One record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    pub seq: u64,
    pub batch: u64,
    pub kind: u16,
    pub payload: Vec<u8>,
}

/// Append the encoding of one record of log `generation` to `out`.
pub fn encode_record(
    out: &mut Vec<u8>,
    generation: u64,
    seq: u64,
    batch: u64,
    kind: u16,
    payload: &[u8],
) {
    let mut h = [0u8; RECORD_HEADER];
    h[..4].copy_from_slice(RECORD_MAGIC);
    h[4..6].copy_from_slice(&kind.to_le_bytes());
    // h[6..8]: flags, none defined.
    h[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[12..16].copy_from_slice(&crc32c(payload).to_le_bytes());
    h[16..24].copy_from_slice(&seq.to_le_bytes());
    h[24..32].copy_from_slice(&batch.to_le_bytes());
    let crc = record_header_crc(&h, generation);
    h[36..].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
}

/// Decode the record starting at `buf[at..]`, refusing payloads above `max_payload`
/// before looking at them (a damaged length never drives an allocation).
pub fn decode_record(
    buf: &[u8],
    at: usize,
    generation: u64,
    max_payload: usize,
) -> Result<RawRecord, String> {
    let rest = buf.get(at..).unwrap_or_default();
    if rest.len() < RECORD_HEADER {
        return Err(format!("partial record header ({} bytes)", rest.len()));
    }
    let h = &rest[..RECORD_HEADER];
    if &h[..4] != RECORD_MAGIC {
        return Err("no record magic".into());
    }
    if u32_at(h, 36) != record_header_crc(h, generation) {
        return Err("record header checksum mismatch".into());
    }
    let len = u32_at(h, 8) as usize;
    if len > max_payload {
        return Err(format!(
            "record length {len} exceeds the limit {max_payload}"
        ));
    }
    let payload = rest
        .get(RECORD_HEADER..RECORD_HEADER + len)
        .ok_or_else(|| {
            format!(
                "short payload: {} of {len} bytes",
                rest.len() - RECORD_HEADER
            )
        })?;
    if u32_at(h, 12) != crc32c(payload) {
        return Err("payload checksum mismatch".into());
    }
    Ok(RawRecord {
        seq: u64_at(h, 16),
        batch: u64_at(h, 24),
        kind: u16_at(h, 4),
        payload: payload.to_vec(),
    })
}

/// What a scan of a log's records found.
#[derive(Debug)]
pub struct Scan {
    pub records: Vec<RawRecord>,
    /// End of the last valid record: where appends continue.
    pub valid_end: usize,
    /// Why the bytes from `valid_end` on were not records (a torn tail), if any.
    pub torn: Option<String>,
}

/// Damage in the middle of a log: valid records committed after it follow.
#[derive(Debug, PartialEq, Eq)]
pub struct MidLogDamage {
    pub offset: usize,
    pub reason: String,
    pub later_seq: u64,
    pub later_offset: usize,
}

/// Read the records of a log body (`buf` is the whole file, its header already checked)
/// expecting sequence numbers from `first_seq` on. The first damaged spot ends the scan;
/// it is a torn tail unless a valid record of a later commit batch follows it.
pub fn scan_log(
    buf: &[u8],
    generation: u64,
    first_seq: u64,
    max_payload: usize,
) -> Result<Scan, MidLogDamage> {
    let mut records = Vec::new();
    let mut at = LOG_HEADER.min(buf.len());
    let mut expect = first_seq;
    let reason = loop {
        if at == buf.len() {
            return Ok(Scan {
                records,
                valid_end: at,
                torn: None,
            });
        }
        match decode_record(buf, at, generation, max_payload) {
            Ok(r) if r.seq == expect => {
                at += RECORD_HEADER + r.payload.len();
                expect += 1;
                records.push(r);
            }
            Ok(r) => break format!("sequence number {} where {expect} was due", r.seq),
            Err(reason) => break reason,
        }
    };
    // Anything valid further on? Only records of the damaged spot's own batch (which
    // began at or before `expect`) may follow a torn write.
    let mut probe = at + 1;
    while probe + RECORD_HEADER <= buf.len() {
        if buf[probe..probe + 4] == RECORD_MAGIC[..] {
            if let Ok(r) = decode_record(buf, probe, generation, max_payload) {
                if r.batch > expect {
                    return Err(MidLogDamage {
                        offset: at,
                        reason,
                        later_seq: r.seq,
                        later_offset: probe,
                    });
                }
            }
        }
        probe += 1;
    }
    Ok(Scan {
        records,
        valid_end: at,
        torn: Some(reason),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn headers_round_trip_and_detect_damage() {
        let l = LogHeader {
            generation: 7,
            first_seq: 99,
        };
        let mut b = l.encode();
        assert_eq!(LogHeader::decode(&b), Ok(l));
        b[10] ^= 1;
        assert!(LogHeader::decode(&b).unwrap_err().contains("checksum"));
        let c = CheckpointHeader {
            generation: 3,
            last_seq: 1 << 40,
            len: 12345,
            payload_crc: 0xdead_beef,
        };
        let mut b = c.encode();
        assert_eq!(CheckpointHeader::decode(&b), Ok(c));
        b[47] ^= 0x80;
        assert!(CheckpointHeader::decode(&b).is_err());
        assert!(CheckpointHeader::decode(&b[..20]).is_err());
    }

    #[test]
    fn a_huge_length_is_refused_before_any_allocation() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 5, 1, 1, 2, b"abc");
        assert_eq!(decode_record(&buf, 0, 5, 16).unwrap().payload, b"abc");
        assert!(
            decode_record(&buf, 0, 4, 16).is_err(),
            "another generation's record"
        );
        // Forge a 4 GiB length with a valid header checksum.
        buf[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = record_header_crc(&buf, 5);
        buf[36..40].copy_from_slice(&crc.to_le_bytes());
        let err = decode_record(&buf, 0, 5, 1 << 20).unwrap_err();
        assert!(err.contains("exceeds the limit"), "{err}");
        let err = decode_record(&buf, 0, 5, usize::MAX).unwrap_err();
        assert!(err.contains("short payload"), "{err}");
    }
}
