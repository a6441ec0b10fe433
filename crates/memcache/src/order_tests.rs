//! Property test of the window's rule (requests on different keys run side by side, the rest
//! in order): any pipeline, cut into packets anywhere, against a store whose reads and
//! writes finish in a random order, answers exactly what the same requests answer one at a
//! time.
use std::sync::Arc;

use proptest::prelude::*;

use crate::codec::Limits;
use crate::command::testing::{Harness, JitterStore};
use crate::connection::{Pump, Session, READ_WINDOW};
use crate::context::{Context, Settings};
use crate::window::ReadWindow;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// One request on keys `a`..`d` (values are digits, so `incr` applies).
fn request() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec!["a", "b", "c", "d"]);
    (0..11u8, key.clone(), key, 0..100u32).prop_map(|(op, k, k2, n)| match op {
        0 | 1 => format!("set {k} 0 0 {}\r\n{n}\r\n", n.to_string().len()),
        2 | 3 => format!("get {k}\r\n"),
        4 => format!("get {k} {k2}\r\n"),
        5 => format!("mg {k} v k\r\n"),
        6 => format!("delete {k}\r\n"),
        7 => format!("incr {k} {n}\r\n"),
        8 => format!("append {k} 0 0 1\r\n{}\r\n", n % 10),
        9 => format!("ms {k} 1 T0\r\n{}\r\n", n % 10),
        _ => "mn\r\n".to_string(),
    })
}

/// Feed `input` in the given packets, as the connection loop does.
async fn windowed(store: Arc<JitterStore>, input: &[u8], cuts: &[usize]) -> String {
    let ctx = Context::new(store, Settings::default());
    let mut session = Session::new(Limits::default(), 1 << 20);
    let mut window = ReadWindow::new(READ_WINDOW);
    let mut start = 0;
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    ends.sort_unstable();
    ends.push(input.len());
    for end in ends {
        if end > start {
            session.input.extend_from_slice(&input[start..end]);
            start = end;
        }
        loop {
            let step = session.pump(&ctx, &mut window).await;
            window.collect(&mut session.output).await;
            match step {
                Pump::Wait => {
                    window.next(&mut session.output).await;
                }
                Pump::Flush => {}
                _ => break,
            }
        }
    }
    window.finish(&mut session.output).await;
    String::from_utf8_lossy(&session.output.to_vec()).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_pipeline_answers_as_its_requests_one_at_a_time(
        requests in prop::collection::vec(request(), 1..40),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
        seed in any::<u64>(),
    ) {
        let input = requests.concat();
        let alone = block_on(async {
            let h = Harness::new();
            let mut out = String::new();
            for r in &requests {
                out.push_str(&h.send(r.as_bytes()).await);
            }
            out
        });
        let store = Arc::new(JitterStore::new(seed));
        let together = block_on(windowed(store, input.as_bytes(), &cuts));
        prop_assert_eq!(together, alone);
    }
}
