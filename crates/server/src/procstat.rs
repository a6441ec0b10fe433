//! This process's resource use from /proc (Linux): CPU seconds, resident and virtual
//! memory, open and maximum file descriptors, start time — what Prometheus clients export
//! as `process_*`. Every field is `None` where /proc does not answer.
use std::path::Path;

/// One reading.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcStat {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<f64>,
    pub virtual_bytes: Option<f64>,
    pub open_fds: Option<f64>,
    pub max_fds: Option<f64>,
    pub start_time_seconds: Option<f64>,
}

/// Read /proc/self now.
pub fn read() -> ProcStat {
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let page = rustix::param::page_size() as f64;
    let mut p = ProcStat::default();
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the command name (which may hold spaces), counted from 3 (`state`).
        let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i - 3).and_then(|v| v.parse::<f64>().ok());
        if let (Some(u), Some(s)) = (num(14), num(15)) {
            p.cpu_seconds = Some((u + s) / ticks);
        }
        p.virtual_bytes = num(23);
        p.resident_bytes = num(24).map(|pages| pages * page);
        let btime = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        });
        if let (Some(start), Some(boot)) = (num(22), btime) {
            p.start_time_seconds = Some(boot + start / ticks);
        }
    }
    p.open_fds = std::fs::read_dir(Path::new("/proc/self/fd"))
        .ok()
        .map(|d| d.count() as f64);
    p.max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse::<f64>().ok())
        });
    p
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_this_process() {
        let p = super::read();
        assert!(p.resident_bytes.unwrap() > 0.0);
        assert!(p.open_fds.unwrap() >= 3.0);
        assert!(p.max_fds.unwrap() >= p.open_fds.unwrap());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = p.start_time_seconds.unwrap();
        assert!(start <= now + 1.0 && start > now - 86_400.0 * 365.0);
        assert!(p.cpu_seconds.unwrap() >= 0.0);
    }
}
