//! The `flashtier` binary.
fn main() -> anyhow::Result<()> {
    anyhow::bail!("flashtier: not built yet")
}
