//! Scheduler hints, so background work never sits between a request and a CPU.
//!
//! On a two-core machine the reload thread (rebuilding a large policy set) often holds the core
//! a request's thread wakes up on. Linux's EEVDF scheduler lets the running thread finish its
//! slice (about 1.4 ms here) before the woken one runs, even when the runner is at nice 19, and
//! that wait was the whole p99 cost of a reload. So `serve` asks for a 100 µs slice for every
//! thread it starts (they inherit it), which lets a woken request thread preempt at once, and
//! the reload thread returns to the default slice at nice 19. Kernels before 6.12 ignore slice
//! requests for ordinary threads; every call here is best effort and only logged on failure.
//! This is the crate's one `unsafe` block: a raw `sched_setattr(2)`, which libc does not wrap.

/// The slice requested for serving threads (the kernel's minimum).
pub const SERVING_SLICE_NS: u64 = 100_000;

/// Serving threads: the current nice value, a short slice. Call before starting any thread.
pub fn serving() {
    #[cfg(target_os = "linux")]
    {
        let nice = rustix::process::getpriority_process(None).unwrap_or(0);
        if let Err(e) = linux::set_fair(nice, SERVING_SLICE_NS) {
            tracing::debug!(error = %e, "could not shorten the serving threads' time slice");
        }
    }
}

/// Background threads (policy rebuilds): nice 19 and the kernel's default slice.
pub fn background() {
    #[cfg(target_os = "linux")]
    if let Err(e) = linux::set_fair(19, 0) {
        tracing::debug!(error = %e, "could not lower this background thread's priority");
        if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19) {
            tracing::debug!(error = %e, "could not lower this background thread's nice value");
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    /// `struct sched_attr`, first version (48 bytes), as in `linux/sched/types.h`.
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime: u64,
        deadline: u64,
        period: u64,
    }

    /// `SCHED_OTHER` with `nice` and a requested slice (`0`: the default) for the calling thread.
    pub(super) fn set_fair(nice: i32, slice_ns: u64) -> std::io::Result<()> {
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            flags: 0,
            nice,
            priority: 0,
            runtime: slice_ns,
            deadline: 0,
            period: 0,
        };
        // SAFETY: pid 0 names the calling thread; `attr` is a valid, initialized sched_attr of
        // the size it declares and outlives the call; the kernel only reads it (flags 0).
        #[allow(
            unsafe_code,
            reason = "sched_setattr has no safe wrapper in libc or nix"
        )]
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_setattr,
                0 as libc::pid_t,
                &attr as *const SchedAttr,
                0 as libc::c_uint,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}
