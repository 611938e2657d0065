//! A value fetched from the cloud, served stale while a fresh copy is fetched in the
//! background. The region's instance types and prices are refetched every few minutes, and at
//! a thousand nodes that refetch took 9 s: awaited inside a provisioning pass, it held every
//! pending pod back. A pass now takes the last copy at once; only the very first fetch (there
//! is nothing to serve yet) is awaited.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The last fetched value and when to fetch it again.
struct Kept<T> {
    value: Arc<T>,
    refresh_at: Instant,
}

pub struct Revalidated<T> {
    kept: Arc<Mutex<Option<Kept<T>>>>,
    /// Held by whoever is fetching: one fetch at a time, in the foreground or not.
    fetching: Arc<tokio::sync::Mutex<()>>,
    /// How long a fetched value is served before it is fetched again.
    ttl: Duration,
    /// How soon a failed background fetch is tried again (the old value is served meanwhile).
    retry: Duration,
}

impl<T: Send + Sync + 'static> Revalidated<T> {
    pub fn new(ttl: Duration, retry: Duration) -> Self {
        Revalidated {
            kept: Arc::default(),
            fetching: Arc::default(),
            ttl,
            retry,
        }
    }

    /// The kept value, and when it is due a background `fetch` is started (unless one is
    /// running). With nothing kept yet, `fetch` is awaited and its error returned. `fetch` is
    /// given the previous value, for what it may keep when part of a refetch fails.
    pub async fn get<F, Fut, E>(&self, fetch: F) -> Result<Arc<T>, E>
    where
        F: FnOnce(Option<Arc<T>>) -> Fut,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        if let Some((value, due)) = self.peek(Instant::now()) {
            if due {
                if let Ok(turn) = self.fetching.clone().try_lock_owned() {
                    let refetch = fetch(Some(value.clone()));
                    let (kept, ttl, retry) = (self.kept.clone(), self.ttl, self.retry);
                    tokio::spawn(async move {
                        if let Err(e) = store(&kept, refetch.await, ttl, retry) {
                            tracing::warn!(error = %e, retry_in_s = retry.as_secs(), "background refresh failed; serving the previous copy");
                        }
                        drop(turn);
                    });
                }
            }
            return Ok(value);
        }
        let _turn = self.fetching.lock().await;
        // Someone else's first fetch may have finished while this one waited.
        if let Some((value, _)) = self.peek(Instant::now()) {
            return Ok(value);
        }
        store(&self.kept, fetch(None).await, self.ttl, self.retry)
    }

    /// The kept value and whether it is due a refresh.
    fn peek(&self, now: Instant) -> Option<(Arc<T>, bool)> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.as_ref()
            .map(|k| (k.value.clone(), now >= k.refresh_at))
    }
}

/// Keeps a fetched value until `ttl` has passed; after a failed fetch the kept value (if any)
/// is due again in `retry`.
fn store<T, E>(
    kept: &Mutex<Option<Kept<T>>>,
    outcome: Result<T, E>,
    ttl: Duration,
    retry: Duration,
) -> Result<Arc<T>, E> {
    let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
    let now = Instant::now();
    match outcome {
        Ok(value) => {
            let value = Arc::new(value);
            *kept = Some(Kept {
                value: value.clone(),
                refresh_at: now + ttl,
            });
            Ok(value)
        }
        Err(e) => {
            if let Some(k) = kept.as_mut() {
                k.refresh_at = now + retry;
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::Notify;

    /// A source whose `n`th fetch returns `n` (from 1), or fails while `failing` is set.
    #[derive(Clone, Default)]
    struct Source {
        fetches: Arc<AtomicUsize>,
        failing: Arc<std::sync::atomic::AtomicBool>,
        /// When set, a fetch waits for it before answering.
        gate: Option<Arc<Notify>>,
    }

    impl Source {
        fn fetch(
            &self,
            _previous: Option<Arc<usize>>,
        ) -> impl Future<Output = Result<usize, String>> + Send + 'static {
            let n = self.fetches.fetch_add(1, Ordering::SeqCst) + 1;
            let failing = self.failing.load(Ordering::SeqCst);
            let gate = self.gate.clone();
            async move {
                if let Some(gate) = gate {
                    gate.notified().await;
                }
                if failing {
                    Err(format!("fetch {n} refused"))
                } else {
                    Ok(n)
                }
            }
        }
    }

    /// Waits (bounded) until the background fetch has replaced the kept value with `want`.
    async fn served(cell: &Revalidated<usize>, source: &Source, want: usize) -> usize {
        for _ in 0..1000 {
            let got = *cell.get(|p| source.fetch(p)).await.expect("kept value");
            if got == want {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("value {want} never served");
    }

    #[tokio::test]
    async fn a_fresh_value_is_served_without_fetching() {
        let cell = Revalidated::new(Duration::from_secs(300), Duration::from_secs(30));
        let source = Source::default();
        assert_eq!(*cell.get(|p| source.fetch(p)).await.expect("first"), 1);
        assert_eq!(*cell.get(|p| source.fetch(p)).await.expect("second"), 1);
        assert_eq!(source.fetches.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_due_value_is_served_while_one_refetch_runs_in_the_background() {
        let cell = Revalidated::new(Duration::ZERO, Duration::ZERO);
        let first = Source::default();
        assert_eq!(*cell.get(|p| first.fetch(p)).await.expect("first"), 1);

        // The refetch cannot finish until released, yet every caller is answered at once,
        // and only one refetch starts however many callers find the value due.
        let gate = Arc::new(Notify::new());
        let slow = Source {
            fetches: first.fetches.clone(),
            gate: Some(gate.clone()),
            ..Source::default()
        };
        for _ in 0..3 {
            let answer = tokio::time::timeout(Duration::from_secs(5), cell.get(|p| slow.fetch(p)))
                .await
                .expect("answered without waiting for the refetch");
            assert_eq!(*answer.expect("stale"), 1);
        }
        assert_eq!(slow.fetches.load(Ordering::SeqCst), 2);
        gate.notify_one();
        assert_eq!(served(&cell, &first, 2).await, 2);
    }

    #[tokio::test]
    async fn a_failed_refetch_keeps_the_old_value_and_is_retried() {
        let cell = Revalidated::new(Duration::ZERO, Duration::from_secs(3600));
        let source = Source::default();
        assert_eq!(*cell.get(|p| source.fetch(p)).await.expect("first"), 1);
        source.failing.store(true, Ordering::SeqCst);
        assert_eq!(*cell.get(|p| source.fetch(p)).await.expect("stale"), 1);
        // The failure has been recorded once the background task let go of its turn.
        let _ = cell.fetching.lock().await;
        // Not due again until `retry` has passed: no new fetch, the old value served.
        assert_eq!(*cell.get(|p| source.fetch(p)).await.expect("stale"), 1);
        assert_eq!(source.fetches.load(Ordering::SeqCst), 2);

        let cell = Revalidated::new(Duration::ZERO, Duration::ZERO);
        let source = Source::default();
        cell.get(|p| source.fetch(p)).await.expect("first");
        source.failing.store(true, Ordering::SeqCst);
        cell.get(|p| source.fetch(p)).await.expect("stale");
        let _ = cell.fetching.lock().await;
        source.failing.store(false, Ordering::SeqCst);
        assert_eq!(served(&cell, &source, 3).await, 3);
    }

    #[tokio::test]
    async fn a_failed_first_fetch_is_an_error_and_the_next_call_fetches_again() {
        let cell = Revalidated::new(Duration::from_secs(300), Duration::from_secs(30));
        let source = Source::default();
        source.failing.store(true, Ordering::SeqCst);
        let err = cell.get(|p| source.fetch(p)).await.expect_err("refused");
        assert_eq!(err, "fetch 1 refused");
        source.failing.store(false, Ordering::SeqCst);
        assert_eq!(*cell.get(|p| source.fetch(p)).await.expect("second"), 2);
    }
}
