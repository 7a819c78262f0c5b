//! Adopting re-parented orphans: this test binary is a child subreaper reaping every child, as
//! sandboxd is (its own process: the reaping scope is process-wide and chosen once).

use std::process::{Command, Stdio};
use std::time::Duration;

use supervisor::ExitStatus;
use supervisor::reaper::{AdoptError, ReapScope, reaper, set_scope};

#[tokio::test]
async fn an_orphan_is_adopted_once_and_only_when_it_is_ours() {
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    assert!(set_scope(ReapScope::AllChildren));

    // sh starts a background process (reading our pipe: a background job's own stdin is
    // /dev/null) and exits at once: the process is re-parented to us.
    let mut command = Command::new("sh");
    command
        .args(["-c", "exec 3<&0; sh -c 'read line <&3; exit 7' & echo $!"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut spawned = reaper().spawn(&mut command).unwrap();
    let mut stdin = spawned.child.stdin.take().unwrap();
    let stdout = spawned.child.stdout.take().unwrap();
    let mut line = String::new();
    // One line: the pipe stays open as long as the background process lives.
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    let orphan: i32 = line.trim().parse().unwrap();
    assert_eq!(spawned.exit.await.unwrap(), ExitStatus::Code(0));

    let exit = reaper()
        .adopt(orphan)
        .expect("a re-parented child is adopted");
    assert_eq!(
        reaper().adopt(orphan).unwrap_err(),
        AdoptError::AlreadyRegistered(orphan),
        "a pid is waited for once"
    );
    // Its exit status arrives as for a spawned child.
    std::io::Write::write_all(&mut stdin, b"go\n").unwrap();
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(10), exit)
        .await
        .expect("the adopted child's exit is reported")
        .unwrap();
    assert_eq!(status, ExitStatus::Code(7));

    // Not ours: our own parent, and a pid that no longer exists.
    let parent = nix::unistd::getppid().as_raw();
    assert_eq!(
        reaper().adopt(parent).unwrap_err(),
        AdoptError::NotAChild(parent)
    );
    assert_eq!(
        reaper().adopt(orphan).unwrap_err(),
        AdoptError::NotAChild(orphan)
    );
}
