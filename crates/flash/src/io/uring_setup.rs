//! How each io_uring of the [`super::uring`] executor is set up: the kernel features that
//! trade setup-time work for less CPU per IO (issue 30, "server CPU per flash GET").
//!
//! Why a separate, parsed setting: which of these pays depends on the kernel and on the
//! machine (a shared kernel poller thread costs a CPU that a 2-vCPU VM does not have), so
//! each is a choice to measure on the target, spelled as a short list
//! (`fixed_files,coop_taskrun,sqpoll=2ms`). On the 2-vCPU VM none of them lowered the CPU
//! per flash GET beyond the noise and `sqpoll` doubled it, so the server leaves them off
//! (`FlashConfig::uring_setup` is a library setting, no operator knob). Measurements:
//! docs/serving.md, "eighth sitting".
//!
//! Invariant: every field's default is what the executor did before the setting existed
//! (plain descriptors, no poller, signalled task work).

use std::fmt;
use std::time::Duration;

/// Ring setup choices (see the module docs). Default: none of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UringSetup {
    /// Register the devices' descriptors with each ring (`IORING_REGISTER_FILES`) and name
    /// them by index in SQEs (`types::Fixed`): no fd lookup and reference count per IO.
    /// Default: `false`.
    pub fixed_files: bool,
    /// `IORING_SETUP_COOP_TASKRUN`: a completion's task work does not interrupt the
    /// submitting thread with an IPI while it runs; it runs at that thread's next entry
    /// into the kernel (a sleeping thread is still woken). Default: `false`.
    pub coop_taskrun: bool,
    /// `IORING_SETUP_SQPOLL` with this idle time: a kernel thread (one for all the rings,
    /// `IORING_SETUP_ATTACH_WQ`) polls the submission queues, so submitting needs no
    /// `io_uring_enter` while it is awake; it sleeps after `idle` without work. Its CPU is
    /// the process's. Default: `None` (the submitting thread enters).
    pub sqpoll_idle: Option<Duration>,
}

/// A [`UringSetup`] list that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UringSetupError {
    /// The item that was refused.
    pub item: String,
}

impl fmt::Display for UringSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "io_uring setup item {:?}: expected fixed_files, coop_taskrun or sqpoll=<ms>ms",
            self.item
        )
    }
}

impl std::error::Error for UringSetupError {}

impl UringSetup {
    /// Parse a comma-separated list: `fixed_files`, `coop_taskrun`, `sqpoll=<N>ms`
    /// (`N` ≥ 1); empty or `none` is the default.
    pub fn parse(text: &str) -> Result<Self, UringSetupError> {
        let mut s = Self::default();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let bad = || UringSetupError {
                item: item.to_string(),
            };
            match item {
                "none" => {}
                "fixed_files" => s.fixed_files = true,
                "coop_taskrun" => s.coop_taskrun = true,
                _ => {
                    let ms = item
                        .strip_prefix("sqpoll=")
                        .and_then(|v| v.strip_suffix("ms"))
                        .and_then(|v| v.parse::<u64>().ok())
                        .filter(|&ms| ms > 0)
                        .ok_or_else(bad)?;
                    s.sqpoll_idle = Some(Duration::from_millis(ms));
                }
            }
        }
        Ok(s)
    }
}

/// The list [`UringSetup::parse`] reads back (`none` for the default).
impl fmt::Display for UringSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items = Vec::new();
        if self.fixed_files {
            items.push("fixed_files".to_string());
        }
        if self.coop_taskrun {
            items.push("coop_taskrun".to_string());
        }
        if let Some(idle) = self.sqpoll_idle {
            items.push(format!("sqpoll={}ms", idle.as_millis()));
        }
        if items.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&items.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_back() {
        assert_eq!(UringSetup::parse("").unwrap(), UringSetup::default());
        assert_eq!(UringSetup::parse("none").unwrap(), UringSetup::default());
        let s = UringSetup::parse("fixed_files, coop_taskrun,sqpoll=2ms").unwrap();
        assert!(s.fixed_files && s.coop_taskrun);
        assert_eq!(s.sqpoll_idle, Some(Duration::from_millis(2)));
        assert_eq!(s.to_string(), "fixed_files,coop_taskrun,sqpoll=2ms");
        assert_eq!(UringSetup::parse(&s.to_string()).unwrap(), s);
        assert_eq!(UringSetup::default().to_string(), "none");
    }

    #[test]
    fn refuses_unknown_items() {
        for bad in ["fixed", "sqpoll", "sqpoll=0ms", "sqpoll=2", "sqpoll=xms"] {
            let e = UringSetup::parse(bad).unwrap_err();
            assert_eq!(e.item, bad);
        }
    }
}
