//! Fuzz decode + execute: arbitrary bytes through the real command layer on a `ModelStore`
//! must never panic. The runtime is built once and shared by every input (it holds no state
//! between `block_on` calls); the store, context and session are fresh per input.
#![no_main]

use std::sync::{Arc, OnceLock};

use flashtier_cache::{Clock, ModelStore};
use flashtier_memcache::codec::Limits;
use flashtier_memcache::connection::{Pump, Session, READ_WINDOW};
use flashtier_memcache::window::ReadWindow;
use flashtier_memcache::{Context, Settings};
use libfuzzer_sys::fuzz_target;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("tokio runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    let rt = runtime();
    let store = Arc::new(ModelStore::new(Clock::system(), 256));
    let ctx = Context::new(
        store,
        Settings {
            max_item_size: 256,
            ..Settings::default()
        },
    );
    let limits = Limits {
        max_item_size: 256,
        max_line: 128,
        max_get_line: 512,
        max_buffered_line: 1024,
    };
    let mut session = Session::new(limits, 4096);
    rt.block_on(async {
        // As the connection drives it: reads run in the window, answered before anything
        // that must wait for them.
        let mut window = ReadWindow::new(READ_WINDOW);
        for piece in data.chunks(64) {
            session.input.extend_from_slice(piece);
            loop {
                let step = session.pump(&ctx, &mut window).await;
                window.finish(&mut session.output).await;
                match step {
                    Pump::Flush | Pump::Wait => session.output.clear(4096),
                    Pump::NeedInput => break,
                    Pump::Quit | Pump::Close(_) => return,
                }
            }
            session.output.clear(4096);
        }
    });
});
