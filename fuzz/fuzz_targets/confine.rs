//! Fuzzes the file API's path resolver (`sandboxd::files::confine`) with arbitrary bytes
//! against a real tree holding symlinks that lead in, out, up and in circles. The property:
//! every path is refused or fails, or it is opened (or created) inside the root, under both
//! opening strategies (openat2 and the O_NOFOLLOW walk); for paths without `..`, the kernel's
//! own resolution agrees with the plan; nothing outside the root ever changes.
//!
//! The first input byte picks a prefix (none, the root, its real path, the outside directory,
//! `/`, `/tmp`, `/proc/self`) and, with its high bit, whether missing files are created; the
//! remaining bytes are appended as they are.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../sandboxd/tests/support/confine_harness.rs"]
mod harness;

static TREE: OnceLock<harness::Tree> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let tree = TREE.get_or_init(harness::Tree::new);
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let prefixes = tree.prefixes();
    let mut path = prefixes[usize::from(control & 0x7f) % prefixes.len()].clone();
    path.extend_from_slice(rest);
    let create = control & 0x80 != 0;
    if let Err(violation) = tree.check(&path, create) {
        panic!("confinement violated: {violation}");
    }
    if let Err(violation) = tree.check_outside_untouched() {
        panic!("confinement violated by {path:?}: {violation}");
    }
});
