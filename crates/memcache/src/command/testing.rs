//! Test driver: feeds raw protocol bytes through the real decoder and command layer against
//! a `ModelStore` (1024-byte item limit) and returns the reply bytes as text.
use std::sync::Arc;

use flashtier_cache::{Clock, ModelStore};

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
