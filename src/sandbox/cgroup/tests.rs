use super::{readings_at, OOM, PEAK};
use std::os::fd::AsFd;

fn dir_with(files: &[(&str, &str)]) -> (tempfile::TempDir, std::fs::File) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    let fd = std::fs::File::open(dir.path()).expect("open");
    (dir, fd)
}

#[test]
fn readings_come_from_both_files() {
    let (_d, fd) = dir_with(&[
        (PEAK, "524288\n"),
        (OOM, "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"),
    ]);
    assert_eq!(readings_at(fd.as_fd()), Some((Some(524288), true)));
    let (_d, fd) = dir_with(&[(PEAK, "4096\n"), (OOM, "oom_kill 0\n")]);
    assert_eq!(readings_at(fd.as_fd()), Some((Some(4096), false)));
}

/// Files opened ahead are read from their start each time, so a
/// reading reflects the file as it is then, not as it was at open.
#[test]
fn readings_opened_ahead_read_the_files_as_they_are_then() {
    let (dir, fd) = dir_with(&[(PEAK, "4096\n"), (OOM, "oom_kill 0\n")]);
    let opened = super::Readings::open_at(fd.as_fd()).expect("both files");
    assert_eq!(opened.read(), Some((Some(4096), false)));
    std::fs::write(dir.path().join(PEAK), "8192\n").unwrap();
    std::fs::write(dir.path().join(OOM), "oom_kill 1\n").unwrap();
    assert_eq!(opened.read(), Some((Some(8192), true)));
    let (_d, fd) = dir_with(&[(PEAK, "4096\n")]);
    assert!(super::Readings::open_at(fd.as_fd()).is_none());
}

/// A per-spawn directory is always made anew: a missing `spawnd/` is
/// made, an empty leftover is replaced, and one that cannot be removed
/// (a cgroup with processes in it; here, a file) fails the launch.
#[test]
fn per_spawn_directories_are_made_anew() {
    let d = tempfile::tempdir().expect("tempdir");
    let dir = d.path().join("spawnd").join("123-0");
    super::fresh_dir(&dir).expect("parent made on first use");
    super::fresh_dir(&dir).expect("an empty leftover is replaced");
    std::fs::write(dir.join("busy"), "").expect("write");
    assert!(super::fresh_dir(&dir).is_err());
}

/// A pair of fake cgroup directories with the files `reuse` reads and
/// writes; `memory_files` overrides the memory side's. Writes into
/// cgroup files replace their value without truncating, so in these
/// regular files each value written has the width of the one it replaces.
fn fake_pair(memory_files: &[(&str, &str)]) -> (tempfile::TempDir, super::SpawnCgroup) {
    let d = tempfile::tempdir().expect("tempdir");
    let (memory, pids) = (d.path().join("memory"), d.path().join("pids"));
    std::fs::create_dir(&memory).unwrap();
    std::fs::create_dir(&pids).unwrap();
    let defaults = [
        (PEAK, "9"),
        (OOM, "oom_kill 0\n"),
        (super::STAT, "cache 4096\nrss 0\ntotal_cache 99999999\n"),
        (super::KERNEL, "8192\n"),
        ("memory.limit_in_bytes", "0000000"),
    ];
    for (name, text) in defaults.iter().chain(memory_files) {
        std::fs::write(memory.join(name), text).unwrap();
    }
    std::fs::write(pids.join(super::PIDS_NOW), "0\n").unwrap();
    std::fs::write(pids.join("pids.max"), "0").unwrap();
    let cg = super::SpawnCgroup {
        hierarchy: super::Hierarchy::V1,
        memory_dir: super::open_dir(&memory).unwrap(),
        pids_dir: super::open_dir(&pids).unwrap(),
        memory,
        pids,
        readings: None,
    };
    (d, cg)
}

/// A pair as good as new is reset for its next sandbox: peak restarted,
/// limits written again.
#[test]
fn an_idle_pair_as_good_as_new_is_reset_for_the_next_sandbox() {
    let (_d, cg) = fake_pair(&[]);
    assert_eq!(cg.reuse(1 << 20, 7).unwrap(), super::pool::Reuse::Reused);
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(cg.memory.join(PEAK)), "0");
    assert_eq!(read(cg.memory.join("memory.limit_in_bytes")), "1048576");
    assert_eq!(read(cg.pids.join("pids.max")), "7");
}

/// While a reader holds the last sandbox's readings, the pair is not
/// given out; once it lets go, it is.
#[test]
fn a_pair_whose_readings_are_held_is_not_given_out() {
    let (_d, cg) = fake_pair(&[]);
    let held = super::hold_for_reading(cg.open_memory_dir().unwrap()).expect("shared lock");
    assert_eq!(cg.reuse(1 << 20, 7).unwrap(), super::pool::Reuse::Busy);
    assert_eq!(std::fs::read_to_string(cg.memory.join(PEAK)).unwrap(), "9");
    drop(held);
    assert_eq!(cg.reuse(1 << 20, 7).unwrap(), super::pool::Reuse::Reused);
}

/// The pool gives out no pair a reader holds: it stays for later, and
/// a new pair is made instead (here that fails: the fake root is no
/// cgroup hierarchy, so the limit files are missing).
#[test]
fn the_pool_skips_a_held_pair_and_keeps_it() {
    let (d, cg) = fake_pair(&[]);
    let held = super::hold_for_reading(cg.open_memory_dir().unwrap()).expect("shared lock");
    let roots = super::V1Roots {
        memory: d.path().to_path_buf(),
        pids: d.path().to_path_buf(),
    };
    let mut pool = super::CgroupPool::new();
    pool.give_back(cg);
    let made = pool.take(&roots, || "new-0".into(), 1 << 20, 7);
    assert!(made.is_err(), "a new pair was attempted");
    assert_eq!(pool.idle(), 1, "the held pair is kept");
    drop(held);
    let again = pool
        .take(&roots, || "new-1".into(), 1 << 20, 7)
        .expect("reused");
    assert_eq!(pool.idle(), 0);
    assert_eq!(again.memory, d.path().join("memory"));
}

/// A task left, an OOM kill, cached pages or kernel objects above the
/// bounds, or a file that does not say: not given out again.
#[test]
fn a_pair_with_anything_left_is_spent() {
    for files in [
        &[(OOM, "oom_kill 1\n")][..],
        &[(super::STAT, "cache 8003584\nrss 0\n")],
        &[(super::STAT, "cache 0\nrss 300000\n")],
        &[(super::STAT, "cache 0\nrss 0\nswap 300000\n")],
        &[(super::STAT, "total_cache 0\n")],
        &[(super::KERNEL, "2000000\n")],
        &[(OOM, "")],
    ] {
        let (_d, cg) = fake_pair(files);
        assert_eq!(
            cg.reuse(1 << 20, 7).unwrap(),
            super::pool::Reuse::Spent,
            "{files:?}"
        );
    }
    let (_d, cg) = fake_pair(&[]);
    std::fs::write(cg.pids.join(super::PIDS_NOW), "1\n").unwrap();
    assert_eq!(cg.reuse(1 << 20, 7).unwrap(), super::pool::Reuse::Spent);
    // With its OOM file kept open (a pooled pair), the count is read there.
    let (_d, mut cg) = fake_pair(&[(OOM, "oom_kill 1\n")]);
    cg.open_readings();
    assert!(cg.readings.is_some());
    assert_eq!(cg.reuse(1 << 20, 7).unwrap(), super::pool::Reuse::Spent);
    let (_d, mut cg) = fake_pair(&[]);
    cg.open_readings();
    assert_eq!(cg.reuse(1 << 20, 7).unwrap(), super::pool::Reuse::Reused);
}

/// A cgroup removed before it was read gives no readings (not "no OOM
/// kill"), so the daemon waits for the spawner's own.
#[test]
fn a_cgroup_gone_gives_no_readings() {
    let (_d, fd) = dir_with(&[(PEAK, "4096\n")]);
    assert_eq!(readings_at(fd.as_fd()), None);
    let (_d, fd) = dir_with(&[]);
    assert_eq!(readings_at(fd.as_fd()), None);
}

/// A pair that comes back is checked and reset while the spawner is idle,
/// for the limits the last launch asked for; a launch asking for the same
/// takes it with only its peak restarted, and one asking for others gets
/// the limits written too. A pair a reader holds is looked at
/// again a little later.
#[test]
fn an_idle_pair_is_checked_ahead_for_the_last_limits() {
    use std::time::Duration;
    let (d, cg) = fake_pair(&[]);
    let roots = super::V1Roots {
        memory: d.path().to_path_buf(),
        pids: d.path().to_path_buf(),
    };
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).unwrap();
    let mut pool = super::CgroupPool::new();
    pool.give_back(cg);
    assert_eq!(pool.work_due_in(), None, "no limits known before a launch");
    let first = pool.take(&roots, || "new-0".into(), 1 << 20, 7).unwrap();
    let memory = first.memory.clone();
    let held = super::hold_for_reading(first.open_memory_dir().unwrap()).expect("shared lock");
    std::fs::write(memory.join(PEAK), "9").unwrap();
    pool.give_back(first);
    assert_eq!(pool.work_due_in(), Some(Duration::ZERO));
    pool.work();
    assert_eq!(read(memory.join(PEAK)), "9", "untouched while held");
    assert!(
        pool.work_due_in().is_some_and(|d| !d.is_zero()),
        "looked at again later, not in a loop"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(pool.work_due_in(), Some(Duration::ZERO));
    pool.work();
    assert_eq!(read(memory.join(PEAK)), "0", "checked and reset ahead");
    pool.work();
    assert_eq!(pool.work_due_in(), None, "nothing left to check");
    // Same limits: taken without another check, its peak restarted (the
    // check reads the stat files; here they would now say "spent").
    std::fs::write(memory.join(super::STAT), "cache 8003584\nrss 0\n").unwrap();
    std::fs::write(memory.join(PEAK), "5").unwrap();
    let taken = pool.take(&roots, || "new-1".into(), 1 << 20, 7).unwrap();
    assert_eq!(taken.memory, memory);
    assert_eq!(read(memory.join(PEAK)), "0", "peak restarted");
    std::fs::write(memory.join(super::STAT), "cache 4096\nrss 0\n").unwrap();
    // Other limits: only the limits are written.
    pool.give_back(taken);
    pool.work();
    std::fs::write(memory.join(PEAK), "5").unwrap();
    let again = pool.take(&roots, || "new-2".into(), 2 << 20, 9).unwrap();
    assert_eq!(read(again.memory.join("memory.limit_in_bytes")), "2097152");
    assert_eq!(read(again.pids.join("pids.max")), "9");
    assert_eq!(read(memory.join(PEAK)), "0", "peak restarted");
}
