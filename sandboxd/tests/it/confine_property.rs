//! The confinement invariant over many generated paths (seeded, so every run checks the same
//! ones): each path is refused, fails, or lands inside the root, under both opening strategies;
//! for paths without `..` the kernel's own resolution agrees; the outside never changes.
//! The fuzz target (`fuzz/`) checks the same invariant on arbitrary bytes.

#[path = "../support/confine_harness.rs"]
mod harness;

use harness::{NAMES, Tree, Verdict};

const PATHS: usize = 20_000;

fn generate(rng: &mut fastrand::Rng, prefixes: &[Vec<u8>]) -> Vec<u8> {
    // Now and then, raw bytes (including NUL and invalid UTF-8).
    if rng.u8(..) < 8 {
        let len = rng.usize(0..24);
        return (0..len)
            .map(|_| match rng.u8(..4) {
                0 => b'/',
                1 => b'.',
                _ => rng.u8(..),
            })
            .collect();
    }
    let mut path = prefixes[rng.usize(..prefixes.len())].clone();
    for _ in 0..rng.usize(0..7) {
        if !path.is_empty() || rng.bool() {
            path.push(b'/');
        }
        if rng.u8(..) < 4 {
            path.push(b'/');
        }
        path.extend_from_slice(NAMES[rng.usize(..NAMES.len())].as_bytes());
    }
    if rng.u8(..) < 16 {
        path.push(b'/');
    }
    path
}

#[test]
fn generated_paths_never_leave_the_root() {
    let tree = Tree::new();
    let prefixes = tree.prefixes();
    let mut rng = fastrand::Rng::with_seed(0x5eed_f11e);
    let mut counts = [0usize; 4];
    for i in 0..PATHS {
        let path = generate(&mut rng, &prefixes);
        let verdict = tree
            .check(&path, i % 8 == 0)
            .unwrap_or_else(|violation| panic!("path #{i}: {violation}"));
        counts[verdict as usize] += 1;
    }
    tree.check_outside_untouched().unwrap();
    let [refused, failed, opened, created] = counts;
    eprintln!("refused {refused}, failed {failed}, opened {opened}, created {created}");
    // The generator reaches every outcome often, or the test proves little.
    for (name, count) in [
        ("refused", refused),
        ("failed", failed),
        ("opened", opened),
        ("created", created),
    ] {
        assert!(count > PATHS / 50, "only {count} paths {name}");
    }
}

#[test]
fn known_escapes_are_refused() {
    let tree = Tree::new();
    let root = tree.root.path().display().to_string();
    for path in [
        "../../../../etc/passwd".to_string(),
        "/etc/passwd".to_string(),
        format!("{root}/a/link-out/secret"),
        format!("{root}/a/link-up/etc"),
        format!("{root}/a/link-file-out"),
        format!("{root}/a/dangling-out"),
        format!("{root}/a/loop"),
        format!("{root}/b/file\0"),
        "up/../../../x".to_string(),
    ] {
        for create in [false, true] {
            assert_eq!(
                tree.check(path.as_bytes(), create),
                Ok(Verdict::Refused),
                "{path:?}"
            );
        }
    }
    tree.check_outside_untouched().unwrap();
}
