//! `flashtier assets DIR` (hidden): the man pages and shell completions a package ships,
//! generated from the clap definition so they never drift from `--help`: `man/flashtier.1`
//! and one page per subcommand (`flashtier-kv.1`, ...), `completions/flashtier.bash`,
//! `completions/_flashtier` (zsh), `completions/flashtier.fish`.
use std::path::Path;

use anyhow::Context as _;
use clap::CommandFactory as _;
use clap_complete::Shell;

pub fn write(dir: &Path) -> anyhow::Result<()> {
    let man = dir.join("man");
    let comp = dir.join("completions");
    for d in [&man, &comp] {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let cmd = crate::cli::Cli::command();
    page(&man, "flashtier", cmd.clone())?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("flashtier-{}", sub.get_name());
        page(
            &man,
            &name,
            sub.clone()
                .display_name(name.clone())
                .bin_name(name.replace('-', " ")),
        )?;
    }
    for (shell, file) in [
        (Shell::Bash, "flashtier.bash"),
        (Shell::Zsh, "_flashtier"),
        (Shell::Fish, "flashtier.fish"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(
            shell,
            &mut crate::cli::Cli::command(),
            "flashtier",
            &mut out,
        );
        let path = comp.join(file);
        std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn page(dir: &Path, name: &str, cmd: clap::Command) -> anyhow::Result<()> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .title(name.to_uppercase())
        .render(&mut out)
        .with_context(|| format!("cannot render the {name} man page"))?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))
}
