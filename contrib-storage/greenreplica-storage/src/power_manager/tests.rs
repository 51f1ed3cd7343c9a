//! The manager's decisions per layout, and a replayed hinted read-only window.

use std::sync::Arc;

use super::WakeCause;
use crate::clock::VirtualClock;
use crate::drive::Drive;
use crate::layout::{self, LayoutKind, MemberView};
use crate::ledger::Ledger;
use crate::policy::PolicySpec;
use crate::power_state::PowerState;
use crate::profile::DriveProfile;
use crate::service_model::IoKind;
use crate::volume::{Health, MemberSlot, Request, Runner, SleepOutcome, Volume, VolumeError};

const CHUNK: u64 = 65536;
const MEMBER_BYTES: u64 = 64 << 20;

fn idle(n: usize) -> Vec<MemberView> {
    (0..n).map(|_| MemberView::healthy(0.0)).collect()
}

fn members_of(
    kind: LayoutKind,
    n: usize,
    offset: u64,
    len: u64,
    views: &[MemberView],
) -> Vec<usize> {
    let layout = layout::build(kind, n, MEMBER_BYTES, CHUNK).unwrap();
    layout.read_members(offset, len, views).unwrap()
}

#[test]
fn raid10_reads_need_one_copy_per_pair_the_spinning_one() {
    // Both copies asleep alike: the first of each pair.
    assert_eq!(
        members_of(LayoutKind::RAID10, 4, 0, 2 * CHUNK, &idle(4)),
        vec![0, 2]
    );
    // A range within one chunk needs one pair only.
    assert_eq!(
        members_of(LayoutKind::RAID10, 4, CHUNK, 4096, &idle(4)),
        vec![2]
    );
    // The copy already spinning is preferred.
    let mut views = idle(4);
    views[0].ready_at = 9.0;
    views[2].ready_at = 9.0;
    assert_eq!(
        members_of(LayoutKind::RAID10, 4, 0, 2 * CHUNK, &views),
        vec![1, 3]
    );
    // A failed copy is never chosen.
    let mut views = idle(4);
    views[0] = MemberView::failed(0.0);
    assert_eq!(
        members_of(LayoutKind::RAID10, 4, 0, 2 * CHUNK, &views),
        vec![1, 2]
    );
}

#[test]
fn raid5_and_raid6_reads_need_the_data_members_not_parity() {
    // Left-symmetric: row 0 keeps P on the last member (and Q before it for RAID6).
    assert_eq!(
        members_of(LayoutKind::RAID5, 4, 0, CHUNK, &idle(4)),
        vec![0]
    );
    assert_eq!(
        members_of(LayoutKind::RAID5, 4, 0, 3 * CHUNK, &idle(4)),
        vec![0, 1, 2]
    );
    let raid6 = members_of(LayoutKind::RAID6, 5, 0, 3 * CHUNK, &idle(5));
    assert_eq!(raid6.len(), 3, "three data chunks, no P or Q: {raid6:?}");
    // Degraded: the lost data chunk is rebuilt from every other member of its row.
    let mut views = idle(4);
    views[1] = MemberView::failed(0.0);
    assert_eq!(
        members_of(LayoutKind::RAID5, 4, CHUNK, 4096, &views),
        vec![0, 2, 3]
    );
}

#[test]
fn single_reads_need_its_member() {
    assert_eq!(
        members_of(LayoutKind::SINGLE, 1, 4096, 8192, &idle(1)),
        vec![0]
    );
}

#[test]
fn a_whole_volume_range_is_planned_over_one_pattern_only() {
    // 64 MiB members, 64 KiB chunks: the whole volume is thousands of chunks; the answer
    // is the same as for one pattern, and it comes without planning every chunk.
    let layout = layout::build(LayoutKind::RAID10, 8, MEMBER_BYTES, CHUNK).unwrap();
    let all = layout.read_members(0, layout.capacity(), &idle(8)).unwrap();
    assert_eq!(all, vec![0, 2, 4, 6]);
    let raid5 = layout::build(LayoutKind::RAID5, 4, MEMBER_BYTES, CHUNK).unwrap();
    let all = raid5
        .read_members(CHUNK, raid5.capacity() - CHUNK, &idle(4))
        .unwrap();
    assert_eq!(
        all,
        vec![0, 1, 2, 3],
        "parity rotates: every member holds data"
    );
    assert!(
        raid5.read_members(u64::MAX, 2, &idle(4)).is_err(),
        "overflow refused"
    );
}

/// A replay-style volume (drive models, no stored bytes) under `policy`.
fn volume(kind: LayoutKind, members: usize, policy: &str, clock: Arc<VirtualClock>) -> Volume {
    let profile = Arc::new(DriveProfile::load("deskstar-t7k250").unwrap());
    let mode = profile.default_mode_index();
    let spec: PolicySpec = policy.parse().unwrap();
    let layout = layout::build(kind, members, MEMBER_BYTES, CHUNK).unwrap();
    let slots = (0..members)
        .map(|_| {
            let drive = Drive::new(
                profile.clone(),
                mode,
                spec.build(48),
                0.0,
                Ledger::default(),
            );
            MemberSlot::new(None, drive, Health::InSync)
        })
        .collect();
    Volume::new("power", layout, slots, clock, None, None)
}

fn reads(from: f64, count: u64, span: u64) -> Vec<Result<(f64, Request), VolumeError>> {
    (0..count)
        .map(|i| {
            Ok((
                from + i as f64,
                Request {
                    kind: IoKind::Read,
                    offset: (i * 12_345 * 4096) % (span - 4096) / 4096 * 4096,
                    len: 4096,
                    data: None,
                },
            ))
        })
        .collect()
}

/// Sleep at 0, wake at 100 (hinted or not), read the hinted range for 100 s, look at 300.
fn window(hinted: bool) -> (Vec<Ledger>, Vec<Option<super::Awake>>) {
    let clock = Arc::new(VirtualClock::new());
    let v = volume(LayoutKind::RAID10, 4, "cooperative:600", clock.clone());
    assert!(matches!(v.sleep(Some(3600.0)), SleepOutcome::Accepted(_)));
    clock.advance_to(100.0);
    v.tick();
    assert_eq!(v.power_state(), PowerState::Standby);
    let span = 8 * CHUNK;
    let (_, ready_in) = if hinted {
        v.wake_for(&[(0, span)]).unwrap()
    } else {
        v.wake()
    };
    assert!(ready_in > 0.0, "spinning up");
    let mut served = 0;
    let end = Runner::new(&v)
        .run(reads(100.0, 100, span), |_| served += 1)
        .unwrap();
    assert_eq!(served, 100);
    assert!(end < 300.0);
    clock.advance_to(300.0);
    v.tick();
    let awake = v.member_power().into_iter().map(|p| p.awake).collect();
    (v.member_ledgers(300.0), awake)
}

#[test]
fn a_hinted_read_only_window_on_raid10_spins_up_half_the_members() {
    let (ledgers, awake) = window(true);
    let spin_ups: Vec<u64> = ledgers.iter().map(|l| l.spin_ups).collect();
    assert_eq!(spin_ups, vec![1, 0, 1, 0], "one copy of each pair");
    let reads: Vec<u64> = ledgers.iter().map(|l| l.reads).collect();
    assert_eq!(reads[1] + reads[3], 0, "the sleeping copies served nothing");
    assert_eq!(reads[0] + reads[2], 100);
    for sleeper in [1, 3] {
        let standby = ledgers[sleeper].state_seconds.get(PowerState::Standby);
        assert!(
            standby > 299.0,
            "member {sleeper} slept through: {standby} s"
        );
    }
    assert_eq!(awake[0].map(|a| a.cause), Some(WakeCause::Hint));
    assert_eq!(awake[2].map(|a| a.cause), Some(WakeCause::Hint));
    assert_eq!((awake[1], awake[3]), (None, None));

    let (full, full_awake) = window(false);
    assert_eq!(full.iter().map(|l| l.spin_ups).sum::<u64>(), 4);
    assert!(full_awake
        .iter()
        .all(|a| a.map(|a| a.cause) == Some(WakeCause::Request)));
    let energy = |ls: &[Ledger]| ls.iter().map(|l| l.energy_joules).sum::<f64>();
    assert!(
        energy(&ledgers) < energy(&full),
        "hinted {} J vs full {} J",
        energy(&ledgers),
        energy(&full)
    );
}

#[test]
fn a_write_in_a_hinted_window_wakes_what_its_plan_touches() {
    let clock = Arc::new(VirtualClock::new());
    let v = volume(LayoutKind::RAID10, 4, "cooperative:600", clock.clone());
    assert!(matches!(v.sleep(None), SleepOutcome::Accepted(_)));
    clock.advance_to(50.0);
    v.wake_for(&[(0, 4096)]).unwrap();
    let write = Request {
        kind: IoKind::Write,
        offset: 0,
        len: 4096,
        data: None,
    };
    Runner::new(&v)
        .run([Ok::<_, VolumeError>((60.0, write))], |_| {})
        .unwrap();
    let awake: Vec<_> = v
        .member_power()
        .into_iter()
        .map(|p| p.awake.map(|a| a.cause))
        .collect();
    assert_eq!(
        awake,
        vec![Some(WakeCause::Hint), Some(WakeCause::Io), None, None],
        "the write's second copy woke for I/O; the other pair slept on"
    );
}

#[test]
fn other_policies_wake_every_member_even_with_a_hint() {
    let clock = Arc::new(VirtualClock::new());
    let v = volume(LayoutKind::RAID10, 4, "idle-timeout:10", clock.clone());
    clock.advance_to(100.0);
    v.tick();
    assert_eq!(v.power_state(), PowerState::Standby);
    v.wake_for(&[(0, 4096)]).unwrap();
    let ups: u64 = v.member_ledgers(100.0).iter().map(|l| l.spin_ups).sum();
    assert_eq!(ups, 4);
}

#[test]
fn hostile_extents_are_refused_and_wake_nothing() {
    let clock = Arc::new(VirtualClock::new());
    let v = volume(LayoutKind::RAID10, 4, "cooperative:600", clock.clone());
    assert!(matches!(v.sleep(None), SleepOutcome::Accepted(_)));
    clock.advance_to(10.0);
    let cap = v.capacity();
    for bad in [
        vec![(u64::MAX, 2)],
        vec![(cap, 1)],
        vec![(0, cap + 1)],
        vec![(0, 4096); crate::volume::MAX_HINT_EXTENTS + 1],
    ] {
        assert!(v.wake_for(&bad).is_err(), "{:?}", &bad[..1]);
        assert!(v.hint(&bad).is_err());
    }
    assert_eq!(v.power_state(), PowerState::Standby, "nothing woke");
    assert_eq!(v.hint(&[(0, cap)]).unwrap(), 1);
    assert_eq!(v.clock().now(), 10.0);
}

/// A toy RoLo-like manager: one on-duty member at a time, rotated every epoch; the others
/// sleep. It shows the seam carries a policy that decides by epochs for the whole array.
#[derive(Debug)]
struct Rotate {
    on_duty: usize,
    rotated_at: f64,
}

impl super::PowerManager for Rotate {
    fn describe(&self) -> String {
        "rotate".into()
    }

    fn spin_down_at(&self, member: usize, idle_since: f64) -> Option<f64> {
        (member != self.on_duty).then_some(idle_since.max(self.rotated_at))
    }

    fn decide_sleep(
        &self,
        _: &super::ArrayView,
        _: Option<f64>,
    ) -> Result<Vec<super::SleepGrant>, String> {
        Err("rotating".into())
    }

    fn tick_every(&self) -> Option<f64> {
        Some(100.0)
    }

    fn on_tick(&mut self, view: &super::ArrayView) -> Vec<super::PowerAction> {
        self.on_duty = (self.on_duty + 1) % view.members.len();
        self.rotated_at = view.now;
        view.members
            .iter()
            .map(|m| {
                if m.index == self.on_duty {
                    super::PowerAction::Wake { member: m.index }
                } else {
                    super::PowerAction::Sleep(super::SleepGrant {
                        member: m.index,
                        mode: None,
                    })
                }
            })
            .collect()
    }
}

#[test]
fn a_manager_deciding_by_epochs_rotates_the_awake_member() {
    let clock = Arc::new(VirtualClock::new());
    let v = volume(LayoutKind::RAID10, 4, "always-on", clock.clone());
    // Replace the adopted manager: every drive is bound to the shared one.
    v.power_manager().with(|c| {
        c.replace_manager(Box::new(Rotate {
            on_duty: 0,
            rotated_at: 0.0,
        }))
    });
    let mut on_duty = Vec::new();
    for t in [0.0, 50.0, 100.0, 150.0, 200.0] {
        clock.advance_to(t);
        v.tick();
        let awake: Vec<_> = v
            .member_power()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.awake.is_some())
            .map(|(i, p)| (i, p.awake.map(|a| a.cause)))
            .collect();
        on_duty.push(awake);
    }
    // Member 0 starts on duty, so the others spin down at once; the first tick rotates.
    let policy = Some(WakeCause::Policy);
    assert_eq!(
        on_duty,
        vec![
            vec![(1, policy)],
            vec![(1, policy)],
            vec![(2, policy)],
            vec![(2, policy)],
            vec![(3, policy)],
        ],
        "one epoch per 100 s; a member keeps spinning only while on duty"
    );
}
