//! Await several futures together and keep their results in order.
//!
//! Used wherever independent store reads should overlap on flash: the keys of one multi-key
//! get ([`crate::command::retrieval`]) and a run of pipelined read requests on one connection
//! ([`crate::connection`]). Polls every unfinished future on each wake-up; the sets are small
//! (one request's keys, or at most [`crate::connection::READ_BATCH`] requests), so the
//! linear scan is cheaper than a ready queue.
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// A boxed future that may be polled from any worker thread.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Run every future to completion, concurrently, returning the outputs in input order.
pub async fn join_all<T>(futures: Vec<BoxFuture<'_, T>>) -> Vec<T> {
    let mut pending: Vec<Option<BoxFuture<'_, T>>> = futures.into_iter().map(Some).collect();
    let mut results: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut busy = false;
        for (slot, result) in pending.iter_mut().zip(results.iter_mut()) {
            if let Some(fut) = slot {
                match fut.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *result = Some(v);
                        *slot = None;
                    }
                    Poll::Pending => busy = true,
                }
            }
        }
        if busy {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    results.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_overlaps() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        // The first future can only finish after the second has run: awaited one after the
        // other they would never complete.
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let first: BoxFuture<'_, u32> = Box::pin(async move { rx.await.unwrap_or(0) + 1 });
        let second: BoxFuture<'_, u32> = Box::pin(async move {
            let _ = tx.send(41);
            7
        });
        let out = rt.block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                join_all(vec![first, second]),
            )
            .await
        });
        assert_eq!(out.ok(), Some(vec![42, 7]));
    }
}
