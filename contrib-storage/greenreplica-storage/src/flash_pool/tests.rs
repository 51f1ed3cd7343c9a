use super::*;
use crate::member::FileMember;
use crate::parity::test_rng::Rng;

/// A fresh scratch directory for one test (removed when dropped).
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir(tag: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("grs-flash-pool-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

const MIB: u64 = 1 << 20;

fn open(dir: &Path, data: u64, extent: u64) -> Result<FlashPool> {
    FlashPool::open("fast", data, extent, &dir.join("flash-fast.journal"), None)
}

#[test]
fn takes_the_lowest_free_extent_past_the_zero_mib_and_refuses_when_full() {
    let dir = tempdir("t1");
    let pool = open(dir.path(), 4 * MIB, MIB).unwrap();
    assert_eq!(pool.count(), 4);
    assert_eq!(
        pool.take("a").unwrap(),
        Some(1),
        "extent 0 holds the zero MiB"
    );
    assert_eq!(pool.take("b").unwrap(), Some(2));
    assert_eq!(pool.take("a").unwrap(), Some(3));
    assert_eq!(pool.take("b").unwrap(), None, "full");
    assert_eq!(pool.fill(), 1.0);
    pool.release("a", 1).unwrap();
    assert!(pool.release("a", 2).is_err(), "b holds extent 2");
    assert_eq!(pool.take("b").unwrap(), Some(1));
    assert_eq!(pool.held("a"), vec![3]);
    assert_eq!(pool.held("b"), vec![1, 2]);
    let s = pool.status();
    assert_eq!(s["free_extents"], 0);
    assert_eq!(s["extents"], 3);
}

#[test]
fn a_take_is_durable_when_it_returns_and_an_uncommitted_release_is_not() {
    let dir = tempdir("t2");
    {
        let pool = open(dir.path(), 8 * MIB, MIB).unwrap();
        pool.take("a").unwrap();
        pool.take("a").unwrap();
        pool.release("a", 1).unwrap(); // appended, not committed: the "crash" drops it
    }
    let pool = open(dir.path(), 8 * MIB, MIB).unwrap();
    assert_eq!(pool.held("a"), vec![1, 2]);
    // The volume's info lists only extent 2 (its record of extent 1's reclaim was durable).
    assert_eq!(pool.settle("a", &[2]).unwrap(), vec![2]);
    assert_eq!(pool.held("a"), vec![2]);
    drop(pool);
    let pool = open(dir.path(), 8 * MIB, MIB).unwrap();
    assert_eq!(pool.held("a"), vec![2], "settle's releases are committed");
}

#[test]
fn settle_keeps_only_what_both_journals_agree_on() {
    let dir = tempdir("t3");
    let pool = open(dir.path(), 8 * MIB, MIB).unwrap();
    for _ in 0..3 {
        pool.take("a").unwrap();
    }
    pool.take("b").unwrap(); // 4
                             // a's info: 3 and 1 (in allocation order), and 4 — which a released and b took since.
    assert_eq!(pool.settle("a", &[3, 1, 4]).unwrap(), vec![3, 1]);
    assert_eq!(
        pool.held("a"),
        vec![1, 3],
        "2 was never recorded: back to the pool"
    );
    assert_eq!(pool.held("b"), vec![4]);
    assert_eq!(pool.take("c").unwrap(), Some(2));
}

#[test]
fn hostile_journals_and_shapes_are_refused() {
    let dir = tempdir("t4");
    let jdir = dir.path().join("flash-fast.journal");
    {
        let pool = open(dir.path(), 8 * MIB, MIB).unwrap();
        pool.take("a").unwrap();
    }
    let err = open(dir.path(), 16 * MIB, MIB).unwrap_err().to_string();
    assert!(err.contains("restore the old size"), "{err}");
    let err = open(dir.path(), 8 * MIB, 2 * MIB).unwrap_err().to_string();
    assert!(err.contains("extents of"), "{err}");
    // A forged record giving a held extent to another volume.
    {
        let (j, _) = Journal::open(&jdir).unwrap();
        j.append(REC_TAKE, br#"{"extent":1,"volume":"b"}"#).unwrap();
        j.commit().unwrap();
    }
    let err = open(dir.path(), 8 * MIB, MIB).unwrap_err().to_string();
    assert!(err.contains("while a holds it"), "{err}");

    for (data, extent) in [(8 * MIB, 0), (8 * MIB, 1000), (MIB, MIB), (1 << 40, 4096)] {
        assert!(check_shape(data, extent).is_err(), "{data} {extent}");
    }
    let dir = tempdir("t5");
    let jdir = dir.path().join("flash-fast.journal");
    for forged in [
        &br#"{"extent":99,"volume":"a"}"#[..],
        br#"{"extent":0,"volume":"a"}"#,
        br#"{"extent":1,"volume":""}"#,
        br#"not json"#,
    ] {
        std::fs::remove_dir_all(&jdir).ok();
        {
            let (j, _) = Journal::open(&jdir).unwrap();
            j.append(REC_TAKE, forged).unwrap();
            j.commit().unwrap();
        }
        assert!(
            open(dir.path(), 8 * MIB, MIB).is_err(),
            "{}",
            String::from_utf8_lossy(forged)
        );
    }
}

#[test]
fn a_removed_volume_keeps_its_extents_until_the_operator_releases_them() {
    let dir = tempdir("t6");
    {
        let pool = open(dir.path(), 8 * MIB, MIB).unwrap();
        pool.attach("gone").unwrap();
        pool.take("gone").unwrap();
        pool.take("gone").unwrap();
        assert!(pool.release_volume("gone").is_err(), "attached");
    }
    // Restarted without the volume: nothing is released silently.
    let pool = open(dir.path(), 8 * MIB, MIB).unwrap();
    pool.attach("kept").unwrap();
    assert_eq!(pool.held("gone"), vec![1, 2]);
    let s = pool.status();
    let gone = s["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["volume"] == "gone")
        .cloned()
        .unwrap();
    assert_eq!(gone["extents"], 2);
    assert_eq!(gone["assembled"], false);
    assert!(pool.release_volume("nobody").is_err());
    assert_eq!(pool.release_volume("gone").unwrap(), 2);
    drop(pool);
    let pool = open(dir.path(), 8 * MIB, MIB).unwrap();
    assert!(pool.held("gone").is_empty());
    assert_eq!(pool.attach("kept").unwrap(), 1, "slots survive");
    assert_eq!(
        pool.attach("new").unwrap(),
        0,
        "the released slot is reused"
    );
    assert!(pool.attach("new").is_err(), "attached twice");
}

#[test]
fn each_volume_sees_its_own_header_slot_and_the_shared_data_area() {
    let dir = tempdir("t7");
    let data = 8 * MIB;
    let store: Arc<dyn Member> = Arc::new(
        FileMember::open_or_create(
            MemberKind::File,
            &dir.path().join("pool.img"),
            HEADER_AREA + data,
        )
        .unwrap(),
    );
    let pool = FlashPool::open(
        "fast",
        data,
        MIB,
        &dir.path().join("j"),
        Some(store.clone()),
    )
    .unwrap();
    pool.attach("a").unwrap();
    pool.attach("b").unwrap();
    let (a, b) = (pool.member_for("a").unwrap(), pool.member_for("b").unwrap());
    assert!(pool.member_for("c").is_err());
    assert_eq!(a.size(), DATA_OFFSET + data);
    a.write_at(b"header a", 0).unwrap();
    b.write_at(b"header b", 0).unwrap();
    // A write straddling the end of the header slot and the data area.
    a.write_at(&[7u8; 16], DATA_OFFSET - 8).unwrap();
    let mut buf = [0u8; 8];
    a.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"header a");
    b.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"header b");
    b.read_at(&mut buf, DATA_OFFSET).unwrap();
    assert_eq!(buf, [7u8; 8], "the data area is shared");
    store.read_at(&mut buf, HEADER_AREA).unwrap();
    assert_eq!(buf, [7u8; 8]);
    assert!(a.write_at(&[0u8; 2], DATA_OFFSET + data - 1).is_err());
}

/// Two volumes take, record, reclaim and release extents at random, with "crashes" between
/// any two commits of the three journals (the pool's and each volume's, the volumes'
/// modelled by what their volume info made durable): after each restart and `settle`,
/// no extent is held by two volumes and each volume keeps every extent it may still use.
#[test]
fn two_volumes_never_hold_one_extent_across_crashes_between_the_journals() {
    for seed in 0..8u64 {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (seed + 1));
        let dir = tempdir("t8");
        let names = ["a", "b"];
        // Per volume: its runtime info, and its durable info (the volume journal).
        let mut live: [Vec<u32>; 2] = Default::default();
        let mut durable: [Vec<u32>; 2] = Default::default();
        // Extents each volume wrote data into whose info record is durable (it may read
        // them back after a restart): they must stay with it.
        let mut pool = open(dir.path(), 12 * MIB, MIB).unwrap();
        for step in 0..400 {
            let v = rng.below(2);
            match rng.below(10) {
                0..=3 => {
                    if let Some(e) = pool.take(names[v]).unwrap() {
                        assert!(
                            !live[1 - v].contains(&e),
                            "seed {seed} step {step}: {e} twice"
                        );
                        live[v].push(e);
                    }
                }
                4..=5 if !live[v].is_empty() => {
                    // Reclaim one extent; the pool is told after the reclaim.
                    let e = live[v].remove(rng.below(live[v].len()));
                    pool.release(names[v], e).unwrap();
                }
                6..=7 => durable[v] = live[v].clone(), // the volume's journal commits
                8 => {
                    // Crash: the pool loses what it had not committed, the volumes what
                    // their journals had not.
                    drop(pool);
                    pool = open(dir.path(), 12 * MIB, MIB).unwrap();
                    for w in 0..2 {
                        live[w] = pool.settle(names[w], &durable[w]).unwrap();
                        durable[w] = live[w].clone();
                    }
                    for e in &live[0] {
                        assert!(!live[1].contains(e), "seed {seed} step {step}: {e} twice");
                    }
                    for w in 0..2 {
                        let mut held = pool.held(names[w]);
                        let mut mine = live[w].clone();
                        held.sort();
                        mine.sort();
                        assert_eq!(held, mine, "seed {seed} step {step}: pool and volume agree");
                    }
                }
                _ => {}
            }
        }
    }
}
