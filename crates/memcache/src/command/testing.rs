//! Test driver: feeds raw protocol bytes through the real decoder and command layer against
//! a `ModelStore` (1024-byte item limit) and returns the reply bytes as text.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use flashtier_cache::{Clock, Item, ItemWrite, KvStore, ModelStore, Update};

use crate::codec::Limits;
use crate::connection::{Pump, Session};
use crate::context::{Context, Settings};

/// Item limit of the test store.
pub const TEST_MAX_ITEM: usize = 1024;

/// A store, its clock and a context that live across several `send`s.
pub struct Harness {
    pub clock: Clock,
    pub ctx: Context<ModelStore>,
}

impl Harness {
    pub fn new() -> Self {
        let clock = Clock::system();
        let store = Arc::new(ModelStore::new(clock.clone(), TEST_MAX_ITEM));
        let settings = Settings {
            max_item_size: TEST_MAX_ITEM,
            ..Settings::default()
        };
        Self {
            clock,
            ctx: Context::new(store, settings),
        }
    }

    /// Send `input` on a fresh connection and return everything it answered.
    pub async fn send(&self, input: &[u8]) -> String {
        let limits = Limits {
            max_item_size: TEST_MAX_ITEM,
            ..Limits::default()
        };
        let mut session = Session::new(limits, 1 << 20);
        session.input.extend_from_slice(input);
        let mut window = crate::window::ReadWindow::new(crate::connection::READ_WINDOW);
        // As the connection does, without a socket: a full window or a request that must
        // wait for it is answered once the reads before it are.
        loop {
            let step = session.pump(&self.ctx, &mut window).await;
            window.finish(&mut session.output).await;
            if !matches!(step, Pump::Flush | Pump::Wait) {
                break;
            }
        }
        String::from_utf8_lossy(&session.output.to_vec()).into_owned()
    }
}

/// Send `input` to a fresh store.
pub async fn run(input: &[u8]) -> String {
    Harness::new().send(input).await
}

/// What a test store does before a request reaches its `ModelStore`.
pub trait Delay: Send + Sync + 'static {
    /// Before a read.
    fn read(&self) -> impl std::future::Future<Output = ()> + Send;
    /// Before a write (a set or an update).
    fn write(&self) -> impl std::future::Future<Output = ()> + Send;
}

/// A `ModelStore` (`TEST_MAX_ITEM`-size items) behind a [`Delay`]; derefs to the delay's
/// state, so tests read `store.open`, `store.in_flight`, ...
pub struct Delayed<D> {
    pub inner: ModelStore,
    pub delay: D,
}

impl<D> Delayed<D> {
    fn with(delay: D) -> Self {
        Self {
            inner: ModelStore::new(Clock::system(), TEST_MAX_ITEM),
            delay,
        }
    }
}

impl<D> std::ops::Deref for Delayed<D> {
    type Target = D;
    fn deref(&self) -> &D {
        &self.delay
    }
}

impl<D: Delay> KvStore for Delayed<D> {
    async fn get(&self, key: &[u8]) -> Result<Option<Item>, flashtier_cache::Error> {
        self.delay.read().await;
        self.inner.get(key).await
    }
    async fn set(&self, key: &[u8], item: ItemWrite) -> Result<u64, flashtier_cache::Error> {
        self.delay.write().await;
        self.inner.set(key, item).await
    }
    async fn update<R, F>(
        &self,
        key: &[u8],
        f: F,
    ) -> Result<(R, Option<u64>), flashtier_cache::Error>
    where
        R: Send,
        F: FnMut(Option<&Item>) -> (Update, R) + Send,
    {
        self.delay.write().await;
        self.inner.update(key, f).await
    }
    fn flush_all(&self, at: u32) {
        self.inner.flush_all(at)
    }
    fn max_item_size(&self) -> usize {
        self.inner.max_item_size()
    }
    fn clock(&self) -> &Clock {
        self.inner.clock()
    }
    fn stats(&self) -> flashtier_cache::StoreStats {
        self.inner.stats()
    }
    fn stats_section(&self, s: &str) -> Option<Vec<(String, String)>> {
        self.inner.stats_section(s)
    }
}

/// Reads take a while (two yields) and wait while `open` is false, counting how many are in
/// flight at once: tests of reads that overlap. Writes go straight through.
pub struct Gate {
    pub open: AtomicBool,
    pub in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
}

impl Delay for Gate {
    async fn read(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        while !self.open.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
    async fn write(&self) {}
}

/// A store whose reads wait at a [`Gate`].
pub type SlowStore = Delayed<Gate>;

impl SlowStore {
    /// Reads wait while `open` is false.
    pub fn new(open: bool) -> Self {
        Self::with(Gate {
            open: AtomicBool::new(open),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        })
    }
}

/// Reads and writes each yield a pseudo-random number of times (0–3, from a seed) before
/// they run, so requests in a connection's window finish out of order and writes stay
/// pending: tests of what runs beside what.
pub struct Jitter(std::sync::atomic::AtomicU64);

impl Jitter {
    async fn wait(&self) {
        // xorshift64: deterministic for a seed and a sequence of calls.
        let mut x = self.0.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0.store(x, Ordering::Relaxed);
        for _ in 0..(x >> 61) % 4 {
            tokio::task::yield_now().await;
        }
    }
}

impl Delay for Jitter {
    async fn read(&self) {
        self.wait().await
    }
    async fn write(&self) {
        self.wait().await
    }
}

/// A store whose requests finish after [`Jitter`].
pub type JitterStore = Delayed<Jitter>;

impl JitterStore {
    pub fn new(seed: u64) -> Self {
        Self::with(Jitter(std::sync::atomic::AtomicU64::new(seed | 1)))
    }
}
