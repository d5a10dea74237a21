//! Where a request came from, as the audit trail names it beside the
//! caller's uid, gid and pid: by which front end (`via`: the daemon's socket
//! or `spawnd run` and the other commands), and what the kernel says of the
//! asking process — its executable, its cgroup (the unit or container it
//! runs in), when it started (a pid alone is reused) and its login uid (the
//! user a login session began as, kept across `su` and `sudo`).
//!
//! Read from `/proc/PID`. Each part that cannot be read is left out (a
//! daemon running as a service user may not read another user's
//! executable); none of it is ever decided on. The daemon reads a peer's
//! origin once per connection, while the pidfd it holds shows the peer
//! alive, and adds the executable's hash (daemon/origin.rs).

use serde_json::{json, Map, Value};

/// The front end a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A peer of `spawnd serve`'s socket.
    Daemon,
    /// The invoking user of a command (`spawnd run`, `spawnd learn`, …).
    Cli,
}

impl Via {
    /// The wire name: `daemon` or `cli`.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Daemon => "daemon",
            Via::Cli => "cli",
        }
    }
}

/// What is known of the process that asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The front end.
    pub via: Via,
    /// Its executable, as `/proc/PID/exe` names it (in the process's own
    /// mount namespace).
    pub exe: Option<String>,
    /// The executable's SHA-256 (`sha256:` and 64 hex), when it was read.
    pub exe_sha256: Option<String>,
    /// Its cgroup v2 path (`/proc/PID/cgroup`'s `0::` line), or the v1
    /// hierarchies' lines joined with `;` on a host without v2.
    pub cgroup: Option<String>,
    /// When it started, RFC 3339 UTC (to the kernel's clock tick).
    pub start_time: Option<String>,
    /// Its login uid, when a login session set one.
    pub login_uid: Option<u32>,
    /// For a command: the process that ran spawnd (its pid and executable).
    pub parent: Option<(u32, Option<String>)>,
}

impl Origin {
    /// Only the front end: nothing read.
    pub fn via(via: Via) -> Origin {
        Origin {
            via,
            exe: None,
            exe_sha256: None,
            cgroup: None,
            start_time: None,
            login_uid: None,
            parent: None,
        }
    }

    /// The process at `pid`, read from `/proc/PID` (the executable's hash
    /// is the caller's to add).
    pub fn of_process(via: Via, pid: u32) -> Origin {
        let proc = format!("/proc/{pid}");
        Origin {
            via,
            exe: exe_of(&proc),
            exe_sha256: None,
            cgroup: std::fs::read_to_string(format!("{proc}/cgroup"))
                .ok()
                .and_then(|text| cgroup_of(&text)),
            start_time: std::fs::read(format!("{proc}/stat"))
                .ok()
                .and_then(|stat| start_time_of(&stat)),
            login_uid: std::fs::read_to_string(format!("{proc}/loginuid"))
                .ok()
                .and_then(|text| login_uid_of(&text)),
            parent: None,
        }
    }

    /// This process, run as a command: its own origin and its parent's
    /// pid and executable.
    pub fn of_command() -> Origin {
        let mut origin = Origin::of_process(Via::Cli, std::process::id());
        let parent = std::os::unix::process::parent_id();
        origin.parent = Some((parent, exe_of(&format!("/proc/{parent}"))));
        origin
    }

    /// The fields a record's `caller` carries besides uid, gid, pid and
    /// label: `via` always, the rest when known.
    pub fn json_fields(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("via".into(), json!(self.via.as_str()));
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(v) = value {
                m.insert(key.into(), v);
            }
        };
        put("exe", self.exe.as_ref().map(|e| json!(e)));
        put("exe_sha256", self.exe_sha256.as_ref().map(|h| json!(h)));
        put("cgroup", self.cgroup.as_ref().map(|c| json!(c)));
        put("start_time", self.start_time.as_ref().map(|t| json!(t)));
        put("login_uid", self.login_uid.map(|u| json!(u)));
        put(
            "parent",
            self.parent
                .as_ref()
                .map(|(pid, exe)| json!({"pid": pid, "exe": exe})),
        );
        m
    }
}

fn exe_of(proc: &str) -> Option<String> {
    std::fs::read_link(format!("{proc}/exe"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// The cgroup a `/proc/PID/cgroup` text names: the v2 (`0::`) path, else
/// the v1 lines joined with `;`.
fn cgroup_of(text: &str) -> Option<String> {
    if let Some(path) = text.lines().find_map(|l| l.strip_prefix("0::")) {
        return Some(path.to_string());
    }
    let v1: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    (!v1.is_empty()).then(|| v1.join(";"))
}

/// A `/proc/PID/loginuid`: `None` for the unset value, 4294967295.
fn login_uid_of(text: &str) -> Option<u32> {
    text.trim().parse().ok().filter(|u| *u != u32::MAX)
}

/// The start time a `/proc/PID/stat` line gives (field 22, clock ticks
/// since boot, counted after the command name's last `)`), as wall-clock
/// RFC 3339 UTC: now minus the time since boot plus the start.
fn start_time_of(stat: &[u8]) -> Option<String> {
    let ticks = start_ticks(stat)?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    let hz = u64::try_from(hz).ok().filter(|h| *h > 0)?;
    let since_boot = crate::sys::boot_time().ok()?;
    let started_after_boot =
        std::time::Duration::from_nanos(ticks.saturating_mul(1_000_000_000 / hz));
    let ago = since_boot.checked_sub(started_after_boot)?;
    let at = time::OffsetDateTime::now_utc() - ago;
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:2]Z"
    );
    at.format(&fmt).ok()
}

/// Field 22 of a `/proc/PID/stat` line. The command name (field 2, in
/// parentheses) may hold spaces and parentheses of its own, so fields are
/// counted after the last `)`.
pub(crate) fn start_ticks(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // Field 3 (state) comes first after the name.
    rest.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_read_whole() {
        let o = Origin::of_command();
        assert_eq!(o.via, Via::Cli);
        assert!(
            o.exe.as_deref().is_some_and(|e| e.starts_with('/')),
            "{o:?}"
        );
        assert!(o.cgroup.is_some(), "{o:?}");
        let start = o.start_time.clone().unwrap();
        let parsed =
            time::OffsetDateTime::parse(&start, &time::format_description::well_known::Rfc3339)
                .unwrap();
        let age = time::OffsetDateTime::now_utc() - parsed;
        assert!(
            age >= time::Duration::seconds(-1) && age < time::Duration::hours(1),
            "{start}"
        );
        let (ppid, _) = o.parent.clone().unwrap();
        assert_eq!(ppid, std::os::unix::process::parent_id());
        let fields = o.json_fields();
        assert_eq!(fields["via"], "cli");
        assert!(fields.contains_key("start_time"));
    }

    #[test]
    fn cgroup_v2_is_preferred_and_v1_lines_are_kept() {
        assert_eq!(
            cgroup_of("12:pids:/a\n0::/system.slice/ci.service\n").as_deref(),
            Some("/system.slice/ci.service")
        );
        assert_eq!(
            cgroup_of("4:memory:/x\n3:pids:/y\n").as_deref(),
            Some("4:memory:/x;3:pids:/y")
        );
        assert_eq!(cgroup_of(""), None);
    }

    #[test]
    fn an_unset_login_uid_is_left_out() {
        assert_eq!(login_uid_of("4294967295"), None);
        assert_eq!(login_uid_of("1000\n"), Some(1000));
        assert_eq!(login_uid_of("x"), None);
    }
}
