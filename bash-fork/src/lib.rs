//! `agentbox_fork`: a bash loadable builtin that forks the running bash into a new, ready one.
//!
//! sandboxd keeps one long-lived bash per environment kind (a *zygote*, see
//! `sandboxd/src/shell/zygote.rs`) that has already paid for starting bash: the loader, its
//! libraries and locale (milliseconds on a fuse-overlayfs root), and parsing the wrapper script.
//! For each command it is asked for a ready bash, and `agentbox_fork` makes one: a double fork,
//! so that the new bash is re-parented to sandboxd (PID 1 or a child subreaper) and sandboxd
//! reaps it and reads its exit status like any child it spawned.
//!
//! The new bash (the grandchild) is made to look like one that was started from scratch:
//! - it leads a new session and process group (`setsid`), so its pid is its session id, which
//!   is how sandboxd finds and ends every process of a command;
//! - it is a child subreaper, as command bashes are (orphans of the command stay below it);
//! - `$$` and `$PPID` are its own pid and its new parent's (bash computes both once at start);
//! - `$RANDOM` is reseeded (else every fork would produce the same sequence) and `$SECONDS`
//!   counts from now.
//!
//! In the zygote the builtin returns 0 once the intermediate process has exited 0 (the new
//! bash exists), 1 otherwise; in the new bash it returns 0 and the script tells the two apart
//! by `$$`. The symbols it uses (`dollar_dollar_pid`, `set_ppid`, `seedrand`,
//! `shell_start_time`, `shellstart`) are bash 5.2's exported globals; if one is missing
//! `enable -f` fails and sandboxd starts each bash from scratch instead.

use std::ffi::{c_char, c_int, c_void};

/// bash's `struct builtin` (builtins.h), which `enable -f` looks up as `<name>_struct`.
#[repr(C)]
pub struct Builtin {
    name: *const c_char,
    function: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    flags: c_int,
    long_doc: *const *const c_char,
    short_doc: *const c_char,
    handle: *mut c_char,
}

/// The builtin's long help: lines, then a null pointer.
#[repr(transparent)]
pub struct Doc([*const c_char; 3]);
// SAFETY: the pointers point at immutable string literals with 'static lifetime.
#[allow(unsafe_code)]
unsafe impl Sync for Doc {}

static LONG_DOC: Doc = Doc([
    c"Forks this bash into a new one that leads its own session (for sandboxd's shell).".as_ptr(),
    c"Returns 0 in both; the new one has a new $$.".as_ptr(),
    std::ptr::null(),
]);

const BUILTIN_ENABLED: c_int = 0x01;
const EXECUTION_SUCCESS: c_int = 0;
const EXECUTION_FAILURE: c_int = 1;

/// What `enable -f` reads. bash writes the `flags` and `handle` fields when it loads the
/// builtin, so this must be writable memory (a `static mut`), not a read-only constant.
// SAFETY: only bash touches it, from its one thread, through the exported symbol; Rust code
// never reads or writes it.
#[allow(unsafe_code, non_upper_case_globals)]
#[unsafe(no_mangle)]
pub static mut agentbox_fork_struct: Builtin = Builtin {
    name: c"agentbox_fork".as_ptr(),
    function: Some(agentbox_fork),
    flags: BUILTIN_ENABLED,
    long_doc: &LONG_DOC as *const Doc as *const *const c_char,
    short_doc: c"agentbox_fork".as_ptr(),
    handle: std::ptr::null_mut(),
};

// SAFETY: bash 5.2 exports these symbols with these types (shell.c, variables.c,
// lib/sh/random.c); if one is missing, loading the builtin fails instead of calling nothing.
#[allow(unsafe_code)]
unsafe extern "C" {
    /// `$$`, set once at start (shell.c).
    static mut dollar_dollar_pid: libc::pid_t;
    /// What `$SECONDS` counts from (shell.c), in whole seconds and as a timeval.
    static mut shell_start_time: libc::time_t;
    static mut shellstart: libc::timeval;
    /// Sets `$PPID` from `getppid()` (variables.c).
    fn set_ppid();
    /// Reseeds `$RANDOM` (lib/sh/random.c).
    fn seedrand();
}

/// How long the new bash waits to be re-parented after the intermediate process exits.
const REPARENT_WAIT_MICROS: u32 = 1_000_000;

/// The builtin.
///
/// # Safety
/// Called by bash only, between commands, with bash's word list (unused).
#[allow(unsafe_code)]
unsafe extern "C" fn agentbox_fork(_words: *mut c_void) -> c_int {
    // SAFETY: fork(2) in bash, which is single-threaded; each branch below only makes system
    // calls (and, in the new bash, touches bash's own globals) before returning to bash or
    // calling _exit.
    let intermediate = unsafe { libc::fork() };
    match intermediate {
        -1 => EXECUTION_FAILURE,
        0 => {
            // The intermediate process: fork the new bash and exit, so it is re-parented.
            // SAFETY: getpid(2) cannot fail.
            let intermediate = unsafe { libc::getpid() };
            // SAFETY: as above; this process only forks and exits.
            match unsafe { libc::fork() } {
                // SAFETY: _exit(2) ends this process without running bash's exit handlers.
                -1 => unsafe { libc::_exit(1) },
                0 => become_new_shell(intermediate),
                // SAFETY: as above.
                _ => unsafe { libc::_exit(0) },
            }
        }
        pid => {
            let mut status: c_int = 0;
            loop {
                // SAFETY: waits for our own child; `status` is a valid out-pointer.
                let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
                if waited == pid {
                    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
                    return if ok {
                        EXECUTION_SUCCESS
                    } else {
                        EXECUTION_FAILURE
                    };
                }
                if waited == -1
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
                {
                    continue;
                }
                // bash's own SIGCHLD handler may have reaped it first (ECHILD): it existed, and
                // sandboxd's wait for the new bash's report decides.
                return EXECUTION_SUCCESS;
            }
        }
    }
}

/// Makes this process (the grandchild of `intermediate`'s parent) a fresh bash of its own;
/// returns the builtin's status.
// SAFETY: see each block: system calls on this process and bash's globals, from bash's thread.
#[allow(unsafe_code)]
fn become_new_shell(intermediate: libc::pid_t) -> c_int {
    // SAFETY: plain system calls on this process.
    let set_up = unsafe {
        libc::setsid() != -1 && libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    };
    if !set_up {
        // SAFETY: ends this process without running bash's exit handlers (the zygote's).
        unsafe { libc::_exit(1) }
    }
    // $PPID should name sandboxd, the parent once the intermediate process has exited (it
    // does so right after forking us).
    let mut waited = 0;
    // SAFETY: getppid(2) cannot fail.
    while unsafe { libc::getppid() } == intermediate && waited < REPARENT_WAIT_MICROS {
        // SAFETY: usleep(3) only sleeps.
        unsafe { libc::usleep(20) };
        waited += 20;
    }
    let mut now = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    // SAFETY: bash is single-threaded and this process is between bash's commands (inside a
    // builtin), so nothing else reads these globals now; set_ppid and seedrand are bash's own
    // functions, called as bash calls them at start. gettimeofday writes to a valid timeval.
    unsafe {
        dollar_dollar_pid = libc::getpid();
        set_ppid();
        seedrand();
        libc::gettimeofday(&mut now, std::ptr::null_mut());
        shellstart = now;
        shell_start_time = now.tv_sec;
    }
    EXECUTION_SUCCESS
}
