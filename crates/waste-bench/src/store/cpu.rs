//! CPU time as the benchmarks account it: this process's own, the machine's
//! busy time (every process and the kernel's interrupt work, so a store
//! daemon beside the node and the loopback socket's softirqs count), and
//! the share of the machine's that a hypervisor took from the guest
//! (steal). On a VM the host spends cores on the guest's disk IO that the
//! guest never sees as its own work, so a run that reads slows the guest's
//! compute in ways only the steal counter shows (docs/BENCH.md, fifth
//! session).

/// CPU seconds this process has used (user + system, all its threads,
/// exited ones included), from `/proc/self/stat`; `None` where unreadable.
pub fn process_seconds() -> Option<f64> {
    let stat = fs_err::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may
    // hold spaces: state is field 3, utime 14 and stime 15.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i - 3)?.parse::<f64>().ok();
    // /proc reports clock ticks of USER_HZ, 100 per second on Linux.
    Some((ticks(14)? + ticks(15)?) / 100.0)
}

/// ", host stole N % of CPU" where the share is known, for a run's log line.
pub fn steal_note(share: Option<f64>) -> String {
    share.map_or(String::new(), |x| {
        format!(", host stole {:.0} % of CPU", 100.0 * x)
    })
}

/// The machine's CPU time so far, all cores, in clock ticks: the total, the
/// part the guest was busy (user, nice, system, irq, softirq) and the part
/// stolen by the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineTimes {
    pub total: u64,
    pub busy: u64,
    pub steal: u64,
}

impl MachineTimes {
    /// From `/proc/stat`; `None` where unreadable (not Linux).
    pub fn now() -> Option<Self> {
        Self::parse(&fs_err::read_to_string("/proc/stat").ok()?)
    }

    /// Parses the aggregate `cpu` line of a `/proc/stat` text: user, nice,
    /// system, idle, iowait, irq, softirq, steal, then guest times, which
    /// are already counted in user and nice, so not added again.
    pub fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // Kernels before 2.6.11 had no steal field.
        let steal = ticks.get(7).copied().unwrap_or(0);
        let at = |i: usize| ticks.get(i).copied().unwrap_or(0);
        Some(Self {
            total: ticks.iter().sum(),
            busy: at(0) + at(1) + at(2) + at(5) + at(6),
            steal,
        })
    }

    /// The share of the machine's CPU time between `earlier` and `self`
    /// that the host stole; `None` when no time passed.
    pub fn steal_share_since(&self, earlier: &Self) -> Option<f64> {
        let total = self.total.checked_sub(earlier.total)?;
        let steal = self.steal.checked_sub(earlier.steal)?;
        (total > 0).then(|| steal as f64 / total as f64)
    }

    /// Seconds the machine's cores were busy between `earlier` and `self`.
    pub fn busy_seconds_since(&self, earlier: &Self) -> Option<f64> {
        // /proc/stat counts clock ticks of USER_HZ, 100 per second on Linux.
        Some(self.busy.checked_sub(earlier.busy)? as f64 / 100.0)
    }

    /// Seconds of the machine's cores the host stole between `earlier` and `self`.
    pub fn stolen_seconds_since(&self, earlier: &Self) -> Option<f64> {
        Some(self.steal.checked_sub(earlier.steal)? as f64 / 100.0)
    }
}

/// Measures the machine's CPU over a span, begun by `start`: the share the
/// host stole and the seconds of busy cores.
#[derive(Debug)]
pub struct MachineMeter(Option<MachineTimes>);

impl MachineMeter {
    pub fn start() -> Self {
        Self(MachineTimes::now())
    }

    /// The steal share since `start`; `None` where `/proc/stat` is unreadable.
    pub fn steal_share(&self) -> Option<f64> {
        MachineTimes::now()?.steal_share_since(&self.0?)
    }

    /// Busy CPU seconds of all cores since `start`; `None` where
    /// `/proc/stat` is unreadable.
    pub fn busy_seconds(&self) -> Option<f64> {
        MachineTimes::now()?.busy_seconds_since(&self.0?)
    }

    /// CPU seconds of all cores the host stole since `start`; `None` where
    /// `/proc/stat` is unreadable.
    pub fn stolen_seconds(&self) -> Option<f64> {
        MachineTimes::now()?.stolen_seconds_since(&self.0?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The process's CPU time parses and grows with work done.
    #[test]
    fn process_seconds_counts_work() {
        let before = process_seconds().expect("/proc/self/stat parses");
        let started = std::time::Instant::now();
        let mut x = 1u64;
        while started.elapsed() < std::time::Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
        let after = process_seconds().unwrap();
        // 200 ms of spinning on a shared machine: at least some ticks of it.
        assert!(after - before >= 0.05, "{before} -> {after}");
        assert!(after - before < 60.0);
    }

    /// The fields of the aggregate line, as proc(5) orders them; guest
    /// times not added twice, per-core lines ignored.
    #[test]
    fn machine_times_parse_proc_stat() {
        let stat = "cpu  100 5 50 800 20 1 2 30 7 0\n\
                    cpu0 50 2 25 400 10 0 1 15 3 0\n\
                    intr 12345\n";
        let t = MachineTimes::parse(stat).unwrap();
        assert_eq!(
            t,
            MachineTimes {
                total: 100 + 5 + 50 + 800 + 20 + 1 + 2 + 30,
                busy: 100 + 5 + 50 + 1 + 2,
                steal: 30,
            }
        );
        let later = MachineTimes {
            total: t.total + 200,
            busy: t.busy + 120,
            steal: t.steal + 50,
        };
        assert_eq!(later.steal_share_since(&t), Some(0.25));
        assert_eq!(later.busy_seconds_since(&t), Some(1.2));
        assert_eq!(t.busy_seconds_since(&later), None);
        assert_eq!(t.steal_share_since(&t), None);
        assert_eq!(t.steal_share_since(&later), None);
        assert_eq!(MachineTimes::parse("cpu0 1 2 3\n"), None);
        assert_eq!(MachineTimes::parse("cpu  1 x 3\n"), None);
    }

    /// This machine's counters read, and a span's share lies in [0, 1].
    #[cfg(target_os = "linux")]
    #[test]
    fn steal_share_of_a_span_is_a_share() {
        MachineTimes::now().expect("/proc/stat parses");
        let meter = MachineMeter::start();
        // Every core's clock advances 100 ticks a second, idle or not.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let s = meter.steal_share().expect("ticks passed");
        assert!((0.0..=1.0).contains(&s), "{s}");
        assert!(meter.busy_seconds().expect("ticks passed") >= 0.0);
    }
}
