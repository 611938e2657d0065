//! glibc's allocator, set for this process's heap: a large, slowly changing cache of the
//! cluster, and every pass a burst of decision data that is gone a moment later. Elsewhere
//! (another libc, another OS) both are no-ops.

use std::time::Duration;

/// How often freed pages are handed back ([`release_freed_pages`]).
const RELEASE_EVERY: Duration = Duration::from_secs(10);

/// Two arenas instead of up to eight per core. glibc gives each thread that allocates an arena
/// of its own and keeps freed memory in each; the runtime moves CPU-bound decisions off its
/// workers ([`super::compute`]), so threads come and go and every arena ended up holding a
/// pass's worth of freed problem (peak RSS 239 → 181 MiB at 3,000 pods). Call it before any
/// thread starts; `MALLOC_ARENA_MAX` in the environment still decides when set.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a tunable; no other thread exists yet to race with it.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// Every [`RELEASE_EVERY`], the whole free pages inside the heap go back to the OS. glibc
/// returns only the free top of an arena by itself; a pass's data freed below the cache's
/// long-lived objects stays resident until the next pass reuses it. A trim takes
/// milliseconds, holding each arena's lock meanwhile.
pub async fn release_freed_pages() {
    let mut every = tokio::time::interval(RELEASE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim is thread-safe (it takes each arena's lock).
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
