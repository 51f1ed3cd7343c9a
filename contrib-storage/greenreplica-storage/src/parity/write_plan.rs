//! Read-modify-write or reconstruct-write for a write to part of a stripe.
//!
//! Parity of a partly written stripe can be brought up to date two ways:
//!
//! * **read-modify-write** (RMW): read the old contents of the chunks being written and the
//!   old parity, then P ⊕= old ⊕ new and Q ⊕= g^i·(old ⊕ new)
//!   ([`super::syndrome::update_p`], [`super::syndrome::update_q`]);
//! * **reconstruct-write** (RCW): read the chunks *not* being (fully) written, then compute
//!   P and Q from the whole new stripe ([`super::syndrome::compute_pq`]).
//!
//! MD's `handle_stripe_dirtying` counts the chunks each way would pre-read and takes RMW
//! only when it reads strictly fewer (a tie goes to RCW). A chunk on a failed member
//! cannot be read: RMW is impossible if it needs one, and RCW then needs that chunk
//! reconstructed first (MD's compute-block path), reading every surviving member. Like MD,
//! which charges an unreadable chunk twice the member count, a reconstructing RCW is chosen
//! only when RMW is impossible.
//!
//! The plan is per chunk ("column"). A caller working at a finer grain (MD works per 4 KiB
//! row of a stripe) applies it per row with the coverage of that row; the members to read
//! are the same, the byte ranges are the written range (RMW) or its complement (RCW).

use super::geometry::Geometry;
use super::ParityError;

/// How much of one data chunk a write replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    Untouched,
    /// Some bytes of the chunk: its old contents are still needed for the rest.
    Partial,
    /// The whole chunk.
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStrategy {
    ReadModifyWrite,
    ReconstructWrite,
}

/// What a stripe write must read first and what it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritePlan {
    pub strategy: WriteStrategy,
    /// Members to read before parity can be computed, ascending.
    pub reads: Vec<usize>,
    /// Data indices whose old contents are on a failed member and must be reconstructed
    /// from `reads` (a degraded reconstruct-write); empty otherwise.
    pub reconstruct: Vec<usize>,
    /// Members to write, ascending: the surviving members of written data chunks and the
    /// surviving parity members.
    pub writes: Vec<usize>,
}

/// Plan a write to `stripe` whose coverage of each data chunk (by data index) is
/// `coverage`, with the members in `failed` unreadable and unwritable.
pub fn plan_write(
    geometry: &Geometry,
    stripe: u64,
    coverage: &[Coverage],
    failed: &[usize],
) -> Result<WritePlan, ParityError> {
    let k = geometry.data_per_stripe();
    let n = geometry.members();
    if coverage.len() != k {
        return Err(ParityError::BufferCount {
            what: "plan_write coverage (one per data chunk)",
            expected: k,
            got: coverage.len(),
        });
    }
    let mut down = vec![false; n];
    for &m in failed {
        *down.get_mut(m).ok_or(ParityError::NoSuchMember {
            member: m,
            members: n,
        })? = true;
    }
    let lost = down.iter().filter(|&&d| d).count();
    let tolerated = geometry.level().parity_count();
    if lost > tolerated {
        return Err(ParityError::TooManyLost {
            level: geometry.level(),
            lost,
            tolerated,
        });
    }
    let alive = |m: usize| !down[m];
    let member_of = |d: usize| geometry.data_member(stripe, d);
    let parity_alive: Vec<usize> = geometry
        .parity_members(stripe)
        .into_iter()
        .filter(|&m| alive(m))
        .collect();
    let written: Vec<usize> = (0..k)
        .filter(|&d| coverage[d] != Coverage::Untouched)
        .collect();

    let mut writes = parity_alive.clone();
    for &d in &written {
        let m = member_of(d)?;
        if alive(m) {
            writes.push(m);
        }
    }
    writes.sort_unstable();
    let nothing_to_read = |writes| WritePlan {
        strategy: WriteStrategy::ReconstructWrite,
        reads: Vec::new(),
        reconstruct: Vec::new(),
        writes,
    };
    if written.is_empty() {
        return Ok(nothing_to_read(Vec::new()));
    }
    if parity_alive.is_empty() {
        // No parity left to keep: the data chunks are written as they are.
        return Ok(nothing_to_read(writes));
    }

    // Read-modify-write: the old data being replaced and the old parity.
    let mut rmw_reads = parity_alive.clone();
    let mut rmw_possible = true;
    for &d in &written {
        let m = member_of(d)?;
        rmw_possible &= alive(m);
        rmw_reads.push(m);
    }

    // Reconstruct-write: every chunk not wholly replaced.
    let mut rcw_reads = Vec::new();
    let mut reconstruct = Vec::new();
    for d in (0..k).filter(|&d| coverage[d] != Coverage::Full) {
        let m = member_of(d)?;
        if alive(m) {
            rcw_reads.push(m);
        } else {
            reconstruct.push(d);
        }
    }
    if !reconstruct.is_empty() {
        rcw_reads = (0..n).filter(|&m| alive(m)).collect();
    }

    // MD charges an unreadable chunk 2·members, so it reconstructs only when RMW cannot be
    // done; RMW never reads more then (it reads a subset of the survivors).
    let rmw_wins = rmw_possible && (rmw_reads.len() < rcw_reads.len() || !reconstruct.is_empty());
    let mut plan = if rmw_wins {
        WritePlan {
            strategy: WriteStrategy::ReadModifyWrite,
            reads: rmw_reads,
            reconstruct: Vec::new(),
            writes,
        }
    } else {
        WritePlan {
            strategy: WriteStrategy::ReconstructWrite,
            reads: rcw_reads,
            reconstruct,
            writes,
        }
    };
    plan.reads.sort_unstable();
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parity::syndrome::{compute_pq, reconstruct, update_p, update_q};
    use crate::parity::test_rng::Rng;
    use crate::parity::{Level, MemberRole};
    use Coverage::{Full, Partial, Untouched};
    use WriteStrategy::{ReadModifyWrite as Rmw, ReconstructWrite as Rcw};

    fn geometry(level: Level, n: usize) -> Geometry {
        Geometry::new(level, n, 4096, 64 * 4096).unwrap()
    }

    #[test]
    fn fewer_pre_reads_wins_and_a_tie_goes_to_reconstruct_write() {
        // RAID5 on 5 members, stripe 0: data on members 0..4, P on member 4.
        let g = geometry(Level::Raid5, 5);
        let plan = |c: &[Coverage]| plan_write(&g, 0, c, &[]).unwrap();
        let one = plan(&[Full, Untouched, Untouched, Untouched]);
        assert_eq!((one.strategy, one.reads), (Rmw, vec![0, 4]), "2 reads vs 3");
        assert_eq!(one.writes, vec![0, 4]);
        let small = plan(&[Untouched, Partial, Untouched, Untouched]);
        assert_eq!((small.strategy, small.reads), (Rmw, vec![1, 4]), "2 vs 4");
        let two = plan(&[Full, Full, Untouched, Untouched]);
        assert_eq!((two.strategy, two.reads), (Rcw, vec![2, 3]), "3 vs 2");
        let three = plan(&[Full, Full, Partial, Untouched]);
        assert_eq!((three.strategy, three.reads), (Rcw, vec![2, 3]), "4 vs 2");
        let stripe = plan(&[Full; 4]);
        assert_eq!(
            (stripe.strategy, stripe.reads.len()),
            (Rcw, 0),
            "full stripe"
        );
        assert_eq!(stripe.writes, vec![0, 1, 2, 3, 4]);
        // RAID5 on 4 members: one chunk costs 2 either way; MD then reconstructs.
        let g4 = geometry(Level::Raid5, 4);
        let tie = plan_write(&g4, 0, &[Full, Untouched, Untouched], &[]).unwrap();
        assert_eq!(tie.strategy, Rcw);
        // RAID6 on 6 members, stripe 0: Q on 0, data on 1..=4, P on 5.
        let g6 = geometry(Level::Raid6, 6);
        let r6 = plan_write(&g6, 0, &[Untouched, Partial, Untouched, Untouched], &[]).unwrap();
        assert_eq!(
            (r6.strategy, r6.reads),
            (Rmw, vec![0, 2, 5]),
            "3 reads vs 4"
        );
        let r6 = plan_write(&g6, 0, &[Untouched, Full, Untouched, Untouched], &[]).unwrap();
        assert_eq!(
            (r6.strategy, r6.reads),
            (Rcw, vec![1, 3, 4]),
            "3 vs 3: a tie"
        );
    }

    #[test]
    fn failed_members_steer_the_choice() {
        let g = geometry(Level::Raid5, 5);
        // The written chunk's member is gone: RMW cannot read its old data.
        let p = plan_write(&g, 0, &[Full, Untouched, Untouched, Untouched], &[0]).unwrap();
        assert_eq!(
            (p.strategy, p.reads, p.writes),
            (Rcw, vec![1, 2, 3], vec![4])
        );
        // An untouched chunk is gone: RMW still works and reads less.
        let p = plan_write(&g, 0, &[Full, Untouched, Untouched, Untouched], &[3]).unwrap();
        assert_eq!((p.strategy, p.reads), (Rmw, vec![0, 4]));
        // RCW would need the lost untouched chunk rebuilt; RMW reads no more: RMW (as MD).
        let p = plan_write(&g, 0, &[Full, Full, Full, Untouched], &[3]).unwrap();
        assert_eq!(
            (p.strategy, p.reads, p.reconstruct),
            (Rmw, vec![0, 1, 2, 4], vec![])
        );
        // RMW impossible (a written chunk's member is gone) and RCW needs a lost chunk's
        // old contents: reconstruct it from every survivor.
        let p = plan_write(&g, 0, &[Full, Full, Full, Partial], &[3]).unwrap();
        assert_eq!((p.strategy, p.reads.clone()), (Rcw, vec![0, 1, 2, 4]));
        assert_eq!(p.reconstruct, vec![3]);
        // Parity gone: the data are written as they are.
        let p = plan_write(&g, 0, &[Partial, Untouched, Untouched, Untouched], &[4]).unwrap();
        assert_eq!((p.reads.len(), p.writes.clone()), (0, vec![0]));
        assert!(matches!(
            plan_write(&g, 0, &[Full; 4], &[0, 1]),
            Err(ParityError::TooManyLost { lost: 2, .. })
        ));
        assert!(plan_write(&g, 0, &[Full; 3], &[]).is_err());
        assert!(plan_write(&g, 0, &[Full; 4], &[5]).is_err());
    }

    /// Carry out random plans on a real stripe, reading only the members each plan names
    /// (the others are unreadable), and check that the parity written is the parity of the
    /// new stripe: the plan's reads always suffice.
    #[test]
    fn property_every_plan_can_be_carried_out_from_its_reads_alone() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let len = 64;
        for round in 0..3000 {
            let level = if round % 2 == 0 {
                Level::Raid5
            } else {
                Level::Raid6
            };
            let n = level.min_members().max(3) + rng.below(5);
            let g = Geometry::new(level, n, 4096, 16 * 4096).unwrap();
            let k = g.data_per_stripe();
            let stripe = rng.below(16) as u64;
            // Old stripe contents per member.
            let old_data: Vec<Vec<u8>> = (0..k).map(|_| rng.bytes(len)).collect();
            let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
            let refs: Vec<&[u8]> = old_data.iter().map(|d| &d[..]).collect();
            compute_pq(&refs, &mut p, &mut q).unwrap();
            let member_contents = |m: usize| match g.member_role(stripe, m).unwrap() {
                MemberRole::Data(d) => old_data[d].clone(),
                MemberRole::P => p.clone(),
                MemberRole::Q => q.clone(),
            };
            // A random write and random failures within tolerance.
            let coverage: Vec<Coverage> = (0..k)
                .map(|_| [Untouched, Partial, Full][rng.below(3)])
                .collect();
            let mut failed: Vec<usize> = (0..rng.below(level.parity_count() + 1))
                .map(|_| rng.below(n))
                .collect();
            failed.sort_unstable();
            failed.dedup();
            let plan = plan_write(&g, stripe, &coverage, &failed).unwrap();
            assert!(
                plan.reads.iter().all(|m| !failed.contains(m)),
                "reads a failed member"
            );
            let mut new_data = old_data.clone();
            let mut patches = vec![(0usize, 0u8); k];
            for d in 0..k {
                match coverage[d] {
                    Untouched => {}
                    Full => new_data[d] = rng.bytes(len),
                    Partial => {
                        patches[d] = (rng.below(len), rng.next() as u8);
                        new_data[d][patches[d].0] = patches[d].1;
                    }
                }
            }
            // What the plan lets us see.
            let read = |m: usize| plan.reads.contains(&m).then(|| member_contents(m));
            let slot_of = |m: usize| match g.member_role(stripe, m).unwrap() {
                MemberRole::Data(d) => d,
                MemberRole::P => k,
                MemberRole::Q => k + 1,
            };
            let (mut new_p, mut new_q) = (vec![0u8; len], vec![0u8; len]);
            let parity_kept: Vec<usize> = g
                .parity_members(stripe)
                .into_iter()
                .filter(|m| !failed.contains(m))
                .collect();
            if parity_kept.is_empty() || coverage.iter().all(|c| *c == Untouched) {
                continue;
            }
            match plan.strategy {
                Rmw => {
                    for &m in &parity_kept {
                        let mut par = read(m).expect("RMW reads the parity");
                        for d in (0..k).filter(|&d| coverage[d] != Untouched) {
                            let old = read(g.data_member(stripe, d).unwrap())
                                .expect("RMW reads the old data");
                            if slot_of(m) == k {
                                update_p(&mut par, &old, &new_data[d]).unwrap();
                            } else {
                                update_q(&mut par, d, &old, &new_data[d]).unwrap();
                            }
                        }
                        if slot_of(m) == k {
                            new_p = par;
                        } else {
                            new_q = par;
                        }
                    }
                }
                Rcw => {
                    // Old chunks as read, lost ones rebuilt from the reads.
                    let mut slots: Vec<Vec<u8>> = vec![vec![0u8; len]; k + level.parity_count()];
                    let mut missing = Vec::new();
                    for m in 0..n {
                        match read(m) {
                            Some(c) => slots[slot_of(m)] = c,
                            None => missing.push(slot_of(m)),
                        }
                    }
                    if !plan.reconstruct.is_empty() {
                        let mut bufs: Vec<&mut [u8]> =
                            slots.iter_mut().map(|s| &mut s[..]).collect();
                        reconstruct(level, &mut bufs, &missing).unwrap();
                    }
                    // New stripe = new full chunks, and old contents (as read or rebuilt;
                    // zeros when the plan gave no way to know them) with the patches.
                    let merged: Vec<Vec<u8>> = (0..k)
                        .map(|d| match coverage[d] {
                            Full => new_data[d].clone(),
                            Partial => {
                                let mut c = slots[d].clone();
                                c[patches[d].0] = patches[d].1;
                                c
                            }
                            Untouched => slots[d].clone(),
                        })
                        .collect();
                    let refs: Vec<&[u8]> = merged.iter().map(|d| &d[..]).collect();
                    compute_pq(&refs, &mut new_p, &mut new_q).unwrap();
                }
            }
            let refs: Vec<&[u8]> = new_data.iter().map(|d| &d[..]).collect();
            let (mut want_p, mut want_q) = (vec![0u8; len], vec![0u8; len]);
            compute_pq(&refs, &mut want_p, &mut want_q).unwrap();
            for &m in &parity_kept {
                if slot_of(m) == k {
                    assert_eq!(new_p, want_p, "round {round} P {plan:?}");
                } else {
                    assert_eq!(new_q, want_q, "round {round} Q {plan:?}");
                }
            }
        }
    }
}
