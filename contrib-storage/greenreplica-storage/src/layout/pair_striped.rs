//! What the pair-striped log layouts (RoLo, QMD) share: the stripe map over mirrored pairs
//! (chunk c on pair c mod P, at row c div P of its home bytes), the reader of their
//! journaled record payloads, and the checkpoint image as a sequence of records.

use super::LayoutRecord;

/// A piece of a request: (caller buffer offset, pair, home offset, length).
pub type Piece = (u64, usize, u64, u64);

/// Volume bytes striped in `stripe_unit` chunks over `pairs` mirrored pairs.
#[derive(Debug, Clone, Copy)]
pub struct PairStripe {
    pub pairs: usize,
    pub stripe_unit: u64,
}

impl PairStripe {
    pub fn new(pairs: usize, stripe_unit: u64) -> Self {
        Self { pairs, stripe_unit }
    }

    /// The pieces of volume bytes `offset..offset+len`, one per stripe unit touched.
    pub fn map(&self, offset: u64, len: u64) -> Vec<Piece> {
        let mut pieces = Vec::new();
        let mut done = 0;
        while done < len {
            let pos = offset + done;
            let chunk = pos / self.stripe_unit;
            let within = pos % self.stripe_unit;
            let piece = (self.stripe_unit - within).min(len - done);
            let pair = (chunk % self.pairs as u64) as usize;
            let home = (chunk / self.pairs as u64) * self.stripe_unit + within;
            pieces.push((done, pair, home, piece));
            done += piece;
        }
        pieces
    }

    /// The volume offset of a pair's home byte.
    pub fn volume_offset(&self, pair: usize, home: u64) -> u64 {
        let row = home / self.stripe_unit;
        (row * self.pairs as u64 + pair as u64) * self.stripe_unit + home % self.stripe_unit
    }
}

/// Little-endian fields of a record payload; errors name the layout.
pub struct Reader<'a> {
    pub rest: &'a [u8],
    layout: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], layout: &'static str) -> Self {
        Self {
            rest: bytes,
            layout,
        }
    }

    pub fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let truncated = || format!("truncated {} record", self.layout);
        let (head, rest) = self.rest.split_at_checked(N).ok_or_else(truncated)?;
        self.rest = rest;
        head.try_into().map_err(|_| truncated())
    }
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }
    pub fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take()?))
    }
}

/// A checkpoint image: the records that rebuild the state, each as kind (u16), payload
/// length (u32) and payload.
pub fn encode_image(records: Vec<LayoutRecord>) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        out.extend(r.kind.to_le_bytes());
        out.extend((r.payload.len() as u32).to_le_bytes());
        out.extend(r.payload);
    }
    out
}

/// The records of an image `encode_image` wrote; a truncated one is an error naming the
/// layout.
pub fn decode_image(mut bytes: &[u8], layout: &'static str) -> Result<Vec<LayoutRecord>, String> {
    let mut records = Vec::new();
    while !bytes.is_empty() {
        let mut rd = Reader::new(bytes, layout);
        let kind = rd.u16()?;
        let n = rd.u32()? as usize;
        let payload = rd
            .rest
            .get(..n)
            .ok_or_else(|| format!("truncated {layout} checkpoint image"))?
            .to_vec();
        bytes = &rd.rest[n..];
        records.push(LayoutRecord { kind, payload });
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_and_volume_offset_are_inverse() {
        let s = PairStripe {
            pairs: 3,
            stripe_unit: 4096,
        };
        let pieces = s.map(4000, 10_000);
        assert_eq!(pieces.iter().map(|p| p.3).sum::<u64>(), 10_000);
        for (buf, pair, home, _) in pieces {
            assert_eq!(s.volume_offset(pair, home), 4000 + buf);
        }
    }

    #[test]
    fn images_round_trip_and_truncation_is_refused() {
        let records = vec![
            LayoutRecord {
                kind: 1,
                payload: vec![1, 2, 3],
            },
            LayoutRecord {
                kind: 7,
                payload: vec![],
            },
        ];
        let image = encode_image(records.clone());
        let back = decode_image(&image, "test").unwrap();
        assert_eq!(
            back.iter()
                .map(|r| (r.kind, r.payload.clone()))
                .collect::<Vec<_>>(),
            records
                .iter()
                .map(|r| (r.kind, r.payload.clone()))
                .collect::<Vec<_>>()
        );
        let err = decode_image(&image[..image.len() - 1], "test").unwrap_err();
        assert!(err.contains("truncated test"), "{err}");
        let mut rd = Reader::new(&[1, 2], "qmd");
        assert_eq!(rd.u8().unwrap(), 1);
        assert!(rd.u32().unwrap_err().contains("truncated qmd record"));
    }
}
