//! The machine a record was written on, as every record names it:
//! `machine {hostname, machine_id, boot_id}` — the host name,
//! `/etc/machine-id` (the installation) and the kernel's boot id (this
//! boot), read once per process. An export then names the machine that
//! wrote each record, not the one exporting it, and a reboot shows as a new
//! `boot_id`. Each part that cannot be read is `null`. (A `net` record's
//! `host` is another thing: where the program connected.)

use serde_json::{json, Value};

/// This machine, read the first time it is asked for.
pub(crate) fn this_machine() -> &'static Value {
    static HOST: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let name = nix::unistd::gethostname()
            .ok()
            .map(|n| n.to_string_lossy().into_owned());
        json!({
            "hostname": name,
            "machine_id": id_file("/etc/machine-id"),
            "boot_id": id_file("/proc/sys/kernel/random/boot_id"),
        })
    })
}

/// A one-line id file's content, trimmed (`None`: unreadable or empty).
fn id_file(path: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let id = text.trim();
    (!id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-'))
        .then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_has_its_hostname_and_boot_id() {
        let host = this_machine();
        assert!(
            host["hostname"].as_str().is_some_and(|n| !n.is_empty()),
            "{host}"
        );
        let boot = host["boot_id"].as_str().unwrap();
        assert_eq!(boot.len(), 36, "{boot}");
        assert!(host.get("machine_id").is_some());
    }
}
