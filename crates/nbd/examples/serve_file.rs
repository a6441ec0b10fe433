//! Serves a file, block device or remote NBD export over NBD, for manual checks.
//!
//! ```text
//! cargo run -p flashtier-nbd --example serve_file -- BACKING LISTEN [EXPORT]
//!   BACKING: a file/device path, nbd://host[:port]/export, nbd+unix:///export?socket=P,
//!            or mem:MIB for a RAM disk
//!   LISTEN:  HOST:PORT or unix:PATH
//! ```
//! Ctrl-C shuts down gracefully and prints the server's counters.

use std::sync::Arc;

use flashtier_backend::{BlockBackend, MemoryBackend};
use flashtier_nbd::{open_backend, Export, ListenAddr, Server, ServerConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(backing), Some(listen)) = (args.first(), args.get(1)) else {
        eprintln!("usage: serve_file BACKING LISTEN [EXPORT]");
        std::process::exit(2);
    };
    let name = args.get(2).cloned().unwrap_or_default();
    let backend: Arc<dyn BlockBackend> = match backing.strip_prefix("mem:") {
        Some(mib) => Arc::new(MemoryBackend::new(mib.parse::<usize>()? << 20)),
        None => open_backend(backing).await?,
    };
    let export = Export::new(name, backend).with_description(format!("serve_file {backing}"));
    let server = Server::new(vec![export], ServerConfig::default())?;
    let listener = Server::bind(&listen.parse::<ListenAddr>()?).await?;
    eprintln!("serving {backing} on {}", listener.local_addr()?);
    let handle = server.shutdown_handle();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            handle.shutdown();
        }
    });
    server.serve(listener).await?;
    for (k, v) in server.stats().totals().key_values() {
        println!("{k}={v}");
    }
    Ok(())
}
