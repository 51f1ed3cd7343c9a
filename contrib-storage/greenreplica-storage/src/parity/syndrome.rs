//! P and Q syndromes over the data chunks of one stripe, their delta update, and recovery.
//!
//! P = D_0 ⊕ D_1 ⊕ … ⊕ D_{k−1} and Q = Σ g^i · D_i over GF(2^8) (see [`super::gf256`]),
//! computed with Horner's rule from the last chunk down, eight bytes at a time, as
//! lib/raid6's generic code does. All buffers of one call have the same length (any
//! length; a partial chunk works the same as a whole one).
//!
//! Recovery follows lib/raid6/recov.c's algebra (re-derived here, not copied): with the lost
//! chunks taken as zero, P′ and Q′ are the syndromes of what survives; then
//!
//! * one data chunk x from P: D_x = P ⊕ P′;
//! * one data chunk x from Q (P lost too): D_x = (Q ⊕ Q′) · g^−x;
//! * two data chunks x < y: with p = P ⊕ P′ and q = Q ⊕ Q′,
//!   D_x = (q ⊕ g^y·p) / (g^x ⊕ g^y) and D_y = p ⊕ D_x;
//! * lost parity is recomputed from the (recovered) data.

use super::gf256::{self, mul2_lanes};
use super::{Level, ParityError};

/// Q weighs data chunk i by g^i; the powers repeat after 255 chunks.
const MAX_Q_DATA: usize = gf256::ORDER;

fn check_lengths(what: &'static str, expected: usize, lens: &[usize]) -> Result<(), ParityError> {
    match lens.iter().position(|&l| l != expected) {
        Some(index) => Err(ParityError::BufferLength {
            what,
            index,
            expected,
            got: lens[index],
        }),
        None => Ok(()),
    }
}

fn load(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

fn store(b: &mut [u8], v: u64) {
    b[..8].copy_from_slice(&v.to_le_bytes());
}

/// P (and Q when given) over `data`, with the chunks listed in `zeroed` taken as all zero.
/// Every buffer has `p.len()` bytes (checked by the callers).
fn syndromes_into(data: &[&[u8]], zeroed: &[usize], p: &mut [u8], mut q: Option<&mut [u8]>) {
    let present: Vec<Option<&[u8]>> = data
        .iter()
        .enumerate()
        .map(|(i, d)| (!zeroed.contains(&i)).then_some(*d))
        .collect();
    let len = p.len();
    let words = len / 8;
    for w in 0..words {
        let at = w * 8;
        let (mut pw, mut qw) = (0u64, 0u64);
        for d in present.iter().rev() {
            let x = d.map_or(0, |d| load(&d[at..]));
            pw ^= x;
            qw = mul2_lanes(qw) ^ x;
        }
        store(&mut p[at..], pw);
        if let Some(q) = q.as_deref_mut() {
            store(&mut q[at..], qw);
        }
    }
    for at in words * 8..len {
        let (mut pb, mut qb) = (0u8, 0u8);
        for d in present.iter().rev() {
            let x = d.map_or(0, |d| d[at]);
            pb ^= x;
            qb = gf256::mul(qb, gf256::GENERATOR) ^ x;
        }
        p[at] = pb;
        if let Some(q) = q.as_deref_mut() {
            q[at] = qb;
        }
    }
}

/// dst ^= src, eight bytes at a time.
fn xor_into(dst: &mut [u8], src: &[u8]) {
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (dw, sw) in (&mut d).zip(&mut s) {
        store(dw, load(dw) ^ load(sw));
    }
    for (db, sb) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *db ^= sb;
    }
}

/// P = XOR of the data chunks, written into `p`.
pub fn compute_p(data: &[&[u8]], p: &mut [u8]) -> Result<(), ParityError> {
    if data.is_empty() {
        return Err(ParityError::BufferCount {
            what: "compute_p data",
            expected: 1,
            got: 0,
        });
    }
    let lens: Vec<usize> = data.iter().map(|d| d.len()).collect();
    check_lengths("compute_p data", p.len(), &lens)?;
    syndromes_into(data, &[], p, None);
    Ok(())
}

/// P and Q of the data chunks (data index i weighs g^i in Q), written into `p` and `q`.
pub fn compute_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) -> Result<(), ParityError> {
    if data.is_empty() || data.len() > MAX_Q_DATA {
        return Err(ParityError::BufferCount {
            what: "compute_pq data (1..=255 chunks)",
            expected: data.len().clamp(1, MAX_Q_DATA),
            got: data.len(),
        });
    }
    let mut lens: Vec<usize> = data.iter().map(|d| d.len()).collect();
    lens.push(q.len());
    check_lengths("compute_pq buffers", p.len(), &lens)?;
    syndromes_into(data, &[], p, Some(q));
    Ok(())
}

/// Read-modify-write of P: one data chunk (or part of it) changes from `old` to `new`;
/// `p` holds the old parity of the same bytes and becomes the new one.
pub fn update_p(p: &mut [u8], old: &[u8], new: &[u8]) -> Result<(), ParityError> {
    check_lengths("update_p", p.len(), &[old.len(), new.len()])?;
    xor_into(p, old);
    xor_into(p, new);
    Ok(())
}

/// Read-modify-write of Q for data chunk `data_index` changing from `old` to `new`:
/// Q ⊕= g^index · (old ⊕ new).
pub fn update_q(
    q: &mut [u8],
    data_index: usize,
    old: &[u8],
    new: &[u8],
) -> Result<(), ParityError> {
    if data_index >= MAX_Q_DATA {
        return Err(ParityError::NoSuchChunk {
            index: data_index,
            chunks: MAX_Q_DATA,
        });
    }
    check_lengths("update_q", q.len(), &[old.len(), new.len()])?;
    let mut delta = old.to_vec();
    xor_into(&mut delta, new);
    gf256::mul_acc(gf256::exp(data_index), &delta, q);
    Ok(())
}

/// Rebuild the lost chunks of one stripe in place.
///
/// `chunks` holds the stripe in syndrome order: the k data chunks (data index order, see
/// [`super::geometry::Geometry::data_member`]), then P, then for RAID6 Q; all of one length.
/// `lost` lists the indices (into `chunks`) whose contents are unknown: up to one for
/// RAID5, two for RAID6. Their buffers are overwritten; the others are only read.
pub fn reconstruct(
    level: Level,
    chunks: &mut [&mut [u8]],
    lost: &[usize],
) -> Result<(), ParityError> {
    let parity = level.parity_count();
    if chunks.len() <= parity || (level == Level::Raid6 && chunks.len() - parity > MAX_Q_DATA) {
        return Err(ParityError::BufferCount {
            what: "reconstruct: 1..=255 data chunks, then the parity chunks",
            expected: parity + chunks.len().saturating_sub(parity).clamp(1, MAX_Q_DATA),
            got: chunks.len(),
        });
    }
    let len = chunks[0].len();
    let lens: Vec<usize> = chunks.iter().map(|c| c.len()).collect();
    check_lengths("reconstruct chunks", len, &lens)?;
    for (i, &l) in lost.iter().enumerate() {
        if l >= chunks.len() {
            return Err(ParityError::NoSuchChunk {
                index: l,
                chunks: chunks.len(),
            });
        }
        if lost[..i].contains(&l) {
            return Err(ParityError::DuplicateLoss(l));
        }
    }
    if lost.len() > parity {
        return Err(ParityError::TooManyLost {
            level,
            lost: lost.len(),
            tolerated: parity,
        });
    }
    let k = chunks.len() - parity;
    let (p_at, q_at) = (k, k + 1);
    let mut data_lost: Vec<usize> = lost.iter().copied().filter(|&i| i < k).collect();
    data_lost.sort_unstable();
    let p_lost = lost.contains(&p_at);
    let q_lost = level == Level::Raid6 && lost.contains(&q_at);

    // Syndromes of the surviving data (lost data taken as zero).
    let mut p_rest = vec![0u8; len];
    let mut q_rest = vec![0u8; len];
    {
        let data: Vec<&[u8]> = chunks[..k].iter().map(|c| &**c).collect();
        let q = (level == Level::Raid6).then_some(&mut q_rest[..]);
        syndromes_into(&data, &data_lost, &mut p_rest, q);
    }

    match data_lost[..] {
        [] => {}
        [x] if !p_lost => {
            // D_x = P ⊕ P′.
            xor_into(&mut p_rest, chunks[p_at]);
            chunks[x].copy_from_slice(&p_rest);
        }
        [x] => {
            // P is gone too (RAID6 only): D_x = (Q ⊕ Q′) · g^−x.
            xor_into(&mut q_rest, chunks[q_at]);
            let ginv = gf256::inv(gf256::exp(x)).unwrap_or(0);
            gf256::mul_in_place(ginv, &mut q_rest);
            chunks[x].copy_from_slice(&q_rest);
        }
        [x, y] => {
            // p = D_x ⊕ D_y, q = g^x·D_x ⊕ g^y·D_y.
            xor_into(&mut p_rest, chunks[p_at]);
            xor_into(&mut q_rest, chunks[q_at]);
            let (gx, gy) = (gf256::exp(x), gf256::exp(y));
            let denom = gf256::inv(gx ^ gy).unwrap_or(0);
            let a = gf256::mul(gy, denom);
            let mut dx = vec![0u8; len];
            gf256::mul_acc(a, &p_rest, &mut dx);
            gf256::mul_acc(denom, &q_rest, &mut dx);
            xor_into(&mut p_rest, &dx);
            chunks[x].copy_from_slice(&dx);
            chunks[y].copy_from_slice(&p_rest);
        }
        _ => unreachable!("at most two losses were admitted above"),
    }

    if p_lost || q_lost {
        let (data, parity) = chunks.split_at_mut(k);
        let data: Vec<&[u8]> = data.iter().map(|c| &**c).collect();
        let (mut p_new, mut q_new) = (vec![0u8; len], vec![0u8; len]);
        syndromes_into(&data, &[], &mut p_new, q_lost.then_some(&mut q_new[..]));
        if p_lost {
            parity[0].copy_from_slice(&p_new);
        }
        if q_lost {
            parity[1].copy_from_slice(&q_new);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parity::test_rng::Rng;

    /// P and Q byte by byte from the definition, for checking the word-wise code.
    fn reference_pq(data: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
        let len = data[0].len();
        let mut p = vec![0u8; len];
        let mut q = vec![0u8; len];
        for (i, d) in data.iter().enumerate() {
            for b in 0..len {
                p[b] ^= d[b];
                q[b] ^= gf256::mul(gf256::exp(i), d[b]);
            }
        }
        (p, q)
    }

    fn stripe(rng: &mut Rng, k: usize, len: usize, level: Level) -> Vec<Vec<u8>> {
        let data: Vec<Vec<u8>> = (0..k).map(|_| rng.bytes(len)).collect();
        let (p, q) = reference_pq(&data);
        let mut all = data;
        all.push(p);
        if level == Level::Raid6 {
            all.push(q);
        }
        all
    }

    #[test]
    fn word_wise_syndromes_equal_the_definition() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for &len in &[1usize, 7, 8, 9, 63, 4096, 4101] {
            for k in 1..=9 {
                let data: Vec<Vec<u8>> = (0..k).map(|_| rng.bytes(len)).collect();
                let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
                let (want_p, want_q) = reference_pq(&data);
                let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
                compute_pq(&refs, &mut p, &mut q).unwrap();
                assert_eq!((p.clone(), q), (want_p.clone(), want_q), "k={k} len={len}");
                let mut p5 = vec![0xffu8; len];
                compute_p(&refs, &mut p5).unwrap();
                assert_eq!(p5, want_p);
            }
        }
    }

    #[test]
    fn q_of_a_single_byte_column_matches_a_hand_computation() {
        // D0 = 1, D1 = 1, D2 = 1: Q = 1 ⊕ 2 ⊕ 4 = 7; D3 = 0x80 adds g^3·0x80 = x^10 = 0x74.
        let cols: [&[u8]; 4] = [&[1], &[1], &[1], &[0x80]];
        let (mut p, mut q) = ([0u8], [0u8]);
        compute_pq(&cols, &mut p, &mut q).unwrap();
        assert_eq!(p, [0x81], "1 ⊕ 1 ⊕ 1 ⊕ 0x80");
        assert_eq!(q, [7 ^ 0x74]);
    }

    /// Erase every single chunk (RAID5) or pair of chunks (RAID6) of random stripes, fill
    /// the erased buffers with garbage, reconstruct, and compare with the original.
    #[test]
    fn property_any_one_or_two_lost_chunks_are_recovered_exactly() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for round in 0..60 {
            let level = if round % 2 == 0 {
                Level::Raid5
            } else {
                Level::Raid6
            };
            let k = 1 + rng.below(10);
            let len = 1 + rng.below(300);
            let original = stripe(&mut rng, k, len, level);
            let n = original.len();
            let mut losses: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
            if level == Level::Raid6 {
                for a in 0..n {
                    for b in a + 1..n {
                        losses.push(vec![a, b]);
                        losses.push(vec![b, a]);
                    }
                }
            }
            losses.push(vec![]);
            for lost in losses {
                let mut work = original.clone();
                for &i in &lost {
                    work[i] = rng.bytes(len);
                }
                let mut bufs: Vec<&mut [u8]> = work.iter_mut().map(|c| &mut c[..]).collect();
                reconstruct(level, &mut bufs, &lost).unwrap();
                assert_eq!(work, original, "{level} k={k} len={len} lost {lost:?}");
            }
        }
    }

    /// A random sequence of partial-chunk rewrites, each applied by delta update of P and Q,
    /// leaves exactly the parity a full recomputation gives.
    #[test]
    fn property_delta_updates_equal_a_full_recompute() {
        let mut rng = Rng(0xdead_beef_cafe_f00d);
        for _ in 0..40 {
            let k = 1 + rng.below(12);
            let len = 8 + rng.below(200);
            let mut s = stripe(&mut rng, k, len, Level::Raid6);
            for _ in 0..20 {
                let d = rng.below(k);
                let start = rng.below(len);
                let end = start + 1 + rng.below(len - start);
                let new = rng.bytes(end - start);
                let old = s[d][start..end].to_vec();
                let (data_part, parity) = s.split_at_mut(k);
                let (p, q) = parity.split_at_mut(1);
                update_p(&mut p[0][start..end], &old, &new).unwrap();
                update_q(&mut q[0][start..end], d, &old, &new).unwrap();
                data_part[d][start..end].copy_from_slice(&new);
            }
            let (want_p, want_q) = reference_pq(&s[..k]);
            assert_eq!(s[k], want_p);
            assert_eq!(s[k + 1], want_q);
        }
    }

    #[test]
    fn bad_arguments_are_errors_not_panics() {
        let mut a = vec![0u8; 8];
        let mut b = vec![0u8; 8];
        let mut short = vec![0u8; 4];
        let mut p = vec![0u8; 8];
        let mut q = vec![0u8; 8];
        assert!(matches!(
            compute_pq(&[&a[..], &short[..]], &mut p, &mut q),
            Err(ParityError::BufferLength { index: 1, .. })
        ));
        assert!(compute_p(&[], &mut p).is_err());
        assert!(update_p(&mut p, &a, &short).is_err());
        assert!(update_q(&mut q, 255, &a, &b).is_err());
        {
            let mut bufs: Vec<&mut [u8]> = vec![&mut a, &mut b, &mut p];
            assert_eq!(
                reconstruct(Level::Raid5, &mut bufs, &[0, 1]),
                Err(ParityError::TooManyLost {
                    level: Level::Raid5,
                    lost: 2,
                    tolerated: 1
                })
            );
            assert_eq!(
                reconstruct(Level::Raid5, &mut bufs, &[3]),
                Err(ParityError::NoSuchChunk {
                    index: 3,
                    chunks: 3
                })
            );
            assert_eq!(
                reconstruct(Level::Raid5, &mut bufs, &[1, 1]),
                Err(ParityError::DuplicateLoss(1))
            );
        }
        {
            let mut bufs: Vec<&mut [u8]> = vec![&mut a, &mut short];
            assert!(reconstruct(Level::Raid6, &mut bufs, &[]).is_err());
            assert!(reconstruct(Level::Raid5, &mut bufs, &[]).is_err());
        }
    }
}
