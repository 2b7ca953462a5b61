//! Compute threads that share the cores with the IO threads give way to
//! them. An IO thread needs the CPU only for moments (issue the next read,
//! take a completion), but if it waits for a time slice behind a busy
//! forward pass the device sits with fewer reads queued: on the 2-core
//! development VM, 16 IO threads kept 10 reads in the kernel on average
//! while the node's forward pool ran, and 14 with the pool at nice 10
//! (docs/BENCH.md). Raising one's own nice value needs no privilege.

/// The nice value compute threads take.
pub const COMPUTE_NICE: i32 = 10;

/// Lowers the calling thread's CPU priority to nice [`COMPUTE_NICE`], so
/// threads at the default priority (the IO threads) preempt it when they
/// wake. On Linux the nice value belongs to the thread, not the process.
pub fn give_way_to_io() -> std::io::Result<()> {
    // SAFETY: plain syscalls on integers: gettid cannot fail, and
    // setpriority takes no pointers.
    let r = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, COMPUTE_NICE)
    };
    if r == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The call changes this thread's nice value and no other thread's.
    #[test]
    fn only_the_calling_thread_gives_way() {
        let nice_of = |tid: libc::pid_t| -> i32 {
            let stat = fs_err::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
            // Fields after the ")" of the name: state is field 3, nice field 19.
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            rest.split(' ').nth(16).unwrap().parse().unwrap()
        };
        // SAFETY: gettid takes nothing and cannot fail.
        let main = unsafe { libc::gettid() };
        let before = nice_of(main);
        let lowered = std::thread::spawn(move || {
            super::give_way_to_io().unwrap();
            // SAFETY: as above.
            nice_of(unsafe { libc::gettid() })
        })
        .join()
        .unwrap();
        assert_eq!(lowered, super::COMPUTE_NICE.max(before));
        assert_eq!(nice_of(main), before);
    }
}
