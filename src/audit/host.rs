//! The host a record was written on, as every record names it: `host
//! {name, machine_id, boot_id}` — the host name, `/etc/machine-id` (the
//! installation) and the kernel's boot id (this boot), read once per
//! process. An export then names the host that wrote each record, not the
//! one exporting it, and a restart shows as a new `boot_id`. Each part that
//! cannot be read is `null`.

use serde_json::{json, Value};

/// This host, read the first time it is asked for.
pub fn this_host() -> &'static Value {
    static HOST: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let name = nix::unistd::gethostname()
            .ok()
            .map(|n| n.to_string_lossy().into_owned());
        json!({
            "name": name,
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
    fn this_host_has_its_name_and_boot_id() {
        let host = this_host();
        assert!(
            host["name"].as_str().is_some_and(|n| !n.is_empty()),
            "{host}"
        );
        let boot = host["boot_id"].as_str().unwrap();
        assert_eq!(boot.len(), 36, "{boot}");
        assert!(host.get("machine_id").is_some());
    }
}
