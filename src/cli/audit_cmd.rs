//! `spawnd audit verify`, `tail`, `query` and `export`: the audit chain
//! (its rotated files, then the live one: [`crate::audit::chain`]) read for
//! people (one escaped line per record) or as JSON, filtered by
//! [`AuditFilter`] with its times compared as instants.

use crate::failure::FailureKind;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use time::OffsetDateTime;

use super::args::{AuditCommand, AuditFilter, Cli, VerifyArgs};
use super::context::{load_audit_key, load_config};
use super::output::{print_line, Failure, Success};
use crate::audit::chain;
use crate::audit::checkpoint;
use crate::audit::ocsf::Exporter;
use crate::audit::time_bound::record_instant;
use crate::audit::verify::{verify_with as verify_chain, Anchor, Options as VerifyOptions};
use crate::pipeline::load_previous_audit_keys;
use crate::printable::printable;

/// Runs one `audit` subcommand.
pub(super) fn dispatch(cli: &Cli, command: &AuditCommand) -> Result<Success, Failure> {
    match command {
        AuditCommand::Verify(args) => verify(cli, args),
        AuditCommand::Checkpoint {
            signing_key,
            output,
            file,
        } => checkpoint(
            cli,
            file.as_deref(),
            signing_key.as_deref(),
            output.as_deref(),
        ),
        AuditCommand::Tail {
            lines,
            follow,
            from_seq,
            file,
        } => tail(cli, file.as_deref(), *lines, *follow, *from_seq),
        AuditCommand::Keygen {
            file,
            signing,
            public,
        } => match (signing, public) {
            (_, true) => public_key(file),
            (true, false) => keygen_signing(file),
            (false, false) => keygen(file),
        },
        AuditCommand::Query { filter, file } => query(cli, file.as_deref(), filter),
        AuditCommand::Export {
            filter,
            file,
            follow,
            ..
        } => export(cli, file.as_deref(), filter, *follow),
    }
}

/// Verifies a log: exit 0 intact (warnings allowed), 1 tampered.
pub(super) fn verify_log(file: &Path, options: &VerifyOptions) -> Result<Success, Failure> {
    let report = verify_chain(file, options).map_err(|e| {
        Failure::from_io(
            &e,
            FailureKind::Config,
            format!("cannot read audit log {}: {e}", file.display()),
        )
    })?;
    let mut lines = Vec::new();
    match report.tampered.split_first() {
        None => lines.push(format!(
            "{}: intact, {} records (last seq {})",
            file.display(),
            report.records,
            report.last_seq
        )),
        Some((first, rest)) => {
            lines.push(format!("{}: {}", file.display(), tamper_words(first)));
            lines.extend(rest.iter().map(tamper_words));
            if report.tampered_unlisted > 0 {
                lines.push(format!(
                    "… and {} more breaks (only the first {} are listed)",
                    report.tampered_unlisted,
                    crate::audit::verify::MAX_LISTED
                ));
            }
        }
    }
    if let Some(segment) = &report.segment {
        lines.push(match &segment.vouched_by {
            Some(by) => format!("segment from seq {}, start vouched by {by}", segment.from_seq),
            None => format!(
                "segment from seq {}, start unanchored: its first record's prev is taken as it stands (vouch for it with --anchor or --checkpoint at seq {})",
                segment.from_seq,
                segment.from_seq - 1
            ),
        });
    }
    for anchored in &report.anchored {
        lines.push(format!("anchored at {anchored}"));
    }
    if let Some(head) = &report.head {
        lines.push(format!(
            "head: seq {}, counter {}{}",
            head.seq,
            head.counter,
            if head.vouched { ", MAC verified" } else { "" }
        ));
    }
    for w in &report.warnings {
        lines.push(format!("warning: {w}"));
    }
    let tampered = !report.intact();
    let mut data = serde_json::to_value(&report).unwrap_or_default();
    data["file"] = serde_json::json!(file);
    data["intact"] = serde_json::json!(!tampered);
    let mut s = Success::new(data, lines.join("\n"));
    if tampered {
        s.exit = 1;
        s.keep_ok = true;
    }
    Ok(s)
}

/// `TAMPERED at seq S (line L): why`.
fn tamper_words(t: &crate::audit::verify::Tamper) -> String {
    format!(
        "TAMPERED at seq {}{}: {}",
        t.seq,
        if t.line > 0 {
            format!(" (line {})", t.line)
        } else {
            String::new()
        },
        t.reason
    )
}

/// `spawnd audit verify [FILE] [--key F]… [--checkpoint F]… [--public-key
/// K]… [--anchor SEQ:HASH]… [--from-seq N]` (default FILE: the config's
/// audit path).
pub(super) fn verify(cli: &Cli, args: &VerifyArgs) -> Result<Success, Failure> {
    let config = load_config(cli)?;
    let keys = keyring(&config, &args.keys)?;
    let mut anchors: Vec<Anchor> = args
        .anchors
        .iter()
        .map(|(seq, hash)| Anchor {
            seq: *seq,
            hash: hash.clone(),
            by: format!("--anchor {seq}:{hash}"),
        })
        .collect();
    anchors.extend(checkpoints(&config, &args.checkpoints, &args.public_keys)?);
    let options = VerifyOptions {
        keys: keys.iter().map(|k| k.as_slice()).collect(),
        anchors,
        from_seq: args.from_seq,
        now: Some(OffsetDateTime::now_utc()),
    };
    verify_log(&log_path(cli, args.file.as_deref())?, &options)
}

/// The HMAC keys `verify` may meet: the config's current and retired keys,
/// then each `--key` file (0600, any length: a retired key may predate the
/// 32-byte minimum).
fn keyring(
    config: &crate::config::Config,
    extra: &[PathBuf],
) -> Result<Vec<zeroize::Zeroizing<Vec<u8>>>, Failure> {
    let mut keys: Vec<zeroize::Zeroizing<Vec<u8>>> = Vec::new();
    keys.extend(load_audit_key(config)?.map(zeroize::Zeroizing::new));
    keys.extend(
        load_previous_audit_keys(config)?
            .into_iter()
            .map(zeroize::Zeroizing::new),
    );
    for path in extra {
        let secret =
            crate::vault::read_secret(&crate::config::CredentialSource::File(path.clone()))
                .map_err(|e| Failure::config(format!("--key {}: {e}", path.display())))?;
        keys.push(zeroize::Zeroizing::new(secret.expose().to_vec()));
    }
    Ok(keys)
}

/// The anchors of every checkpoint line in `files`, each signature checked
/// against the public keys given (and the config's checkpoint key's, when
/// this user can read it). A checkpoint that does not verify stops the
/// verification: what it vouches for cannot be trusted.
fn checkpoints(
    config: &crate::config::Config,
    files: &[PathBuf],
    public_keys: &[String],
) -> Result<Vec<Anchor>, Failure> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let mut trusted = Vec::new();
    for given in public_keys {
        let text = if given.starts_with("ed25519:") {
            given.clone()
        } else {
            std::fs::read_to_string(given).map_err(|e| {
                Failure::usage(format!(
                    "--public-key {given}: neither `ed25519:` and 64 hex digits nor a readable file holding them: {e}"
                ))
            })?
        };
        trusted.push(
            checkpoint::parse_public_key(&text)
                .map_err(|e| Failure::usage(format!("--public-key {given}: {e}")))?,
        );
    }
    if let Some(path) = &config.audit.checkpoint_key_file {
        if let Ok(secret) =
            crate::vault::read_secret(&crate::config::CredentialSource::File(path.clone()))
        {
            if let Ok(key) = checkpoint::signing_key(secret.expose()) {
                trusted.push(key.verifying_key());
            }
        }
    }
    if trusted.is_empty() {
        return Err(Failure::usage(
            "--checkpoint needs --public-key KEY: a checkpoint vouches for the log only under a key you trust (`spawnd audit keygen --public SIGNING_KEY` prints it)",
        ));
    }
    let mut anchors = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).map_err(|e| {
            Failure::from_io(
                &e,
                FailureKind::Config,
                format!("cannot read checkpoint file {}: {e}", file.display()),
            )
        })?;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let source = format!("{}:{}", file.display(), i + 1);
            anchors.push(
                checkpoint::verify_line(line, &trusted, &source).map_err(|e| {
                    Failure::config(format!(
                        "checkpoint {source}: {e}; nothing verified (a checkpoint that does not verify vouches for nothing)"
                    ))
                })?,
            );
        }
    }
    Ok(anchors)
}

/// `spawnd audit checkpoint [--signing-key F] [-o OUT] [FILE]`: verifies
/// the chain, then signs its last record's `seq` and `hash`.
pub(super) fn checkpoint(
    cli: &Cli,
    file: Option<&Path>,
    signing_key: Option<&Path>,
    output: Option<&Path>,
) -> Result<Success, Failure> {
    let config = load_config(cli)?;
    let key_path = signing_key
        .map(Path::to_path_buf)
        .or_else(|| config.audit.checkpoint_key_file.clone())
        .ok_or_else(|| Failure::config("no signing key: give --signing-key FILE or set [audit] checkpoint_key_file (make one with `spawnd audit keygen --signing FILE`)"))?;
    let key = read_signing_key(&key_path)?;
    let path = log_path(cli, file)?;
    let keys = keyring(&config, &[])?;
    let options = VerifyOptions {
        keys: keys.iter().map(|k| k.as_slice()).collect(),
        now: Some(OffsetDateTime::now_utc()),
        ..VerifyOptions::default()
    };
    let report = verify_chain(&path, &options).map_err(|e| cannot_read(&path, e))?;
    if !report.intact() || report.records == 0 {
        let why = match report.tamper.as_ref() {
            Some(t) => tamper_words(t),
            None => "the log holds no record".to_string(),
        };
        let mut s = Success::new(
            json!({"file": path, "verified": report}),
            format!(
                "{}: not signed: the chain does not verify ({why}); run `spawnd audit verify` for every break",
                path.display()
            ),
        );
        s.exit = 1;
        return Ok(s);
    }
    let log = std::path::absolute(&path).unwrap_or(path);
    let line = checkpoint::sign(
        &key,
        report.last_seq,
        &report.last_hash,
        &crate::audit::log::now_rfc3339_millis(),
        crate::audit::machine::this_machine().clone(),
        &log,
    );
    let text = Value::Object(line.clone()).to_string();
    if let Some(out) = output {
        append_line(out, &text).map_err(|e| {
            Failure::from_io(
                &e,
                FailureKind::Config,
                format!("cannot append the checkpoint to {}: {e}", out.display()),
            )
        })?;
    }
    Ok(Success::new(Value::Object(line), text))
}

/// Appends `line` and a newline to `path` (created 0644), durably.
fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)?;
    f.write_all(format!("{line}\n").as_bytes())?;
    f.sync_data()
}

/// A signing key file (owned by this user, mode 0600).
fn read_signing_key(path: &Path) -> Result<ed25519_dalek::SigningKey, Failure> {
    let secret =
        crate::vault::read_secret(&crate::config::CredentialSource::File(path.to_path_buf()))
            .map_err(|e| Failure::config(format!("the checkpoint signing key: {e}")))?;
    checkpoint::signing_key(secret.expose()).map_err(|e| {
        Failure::config(format!(
            "the checkpoint signing key {}: {e}",
            path.display()
        ))
    })
}

/// `spawnd audit keygen --signing FILE`: a new ed25519 signing key (its
/// 32-byte seed as 64 hex digits), mode 0600; prints the public key.
pub(super) fn keygen_signing(file: &Path) -> Result<Success, Failure> {
    let text = checkpoint::new_signing_key_text().map_err(|e| Failure::internal(e.to_string()))?;
    write_new_key(file, text.as_bytes())?;
    let key =
        checkpoint::signing_key(text.as_bytes()).map_err(|e| Failure::internal(e.to_string()))?;
    let public = checkpoint::public_key_text(&key.verifying_key());
    Ok(Success::new(
        json!({"file": file, "public_key": public}),
        format!(
            "wrote an ed25519 signing key to {} (mode 0600); set [audit] checkpoint_key_file = \"{}\"\npublic key (give it to verifiers: spawnd audit verify --public-key …):\n{public}",
            file.display(),
            file.display()
        ),
    ))
}

/// `spawnd audit keygen --public FILE`: the public key of a signing key.
pub(super) fn public_key(file: &Path) -> Result<Success, Failure> {
    let key = read_signing_key(file)?;
    let public = checkpoint::public_key_text(&key.verifying_key());
    Ok(Success::new(
        json!({"file": file, "public_key": public}),
        public,
    ))
}

fn log_path(cli: &Cli, file: Option<&Path>) -> Result<PathBuf, Failure> {
    match file {
        Some(f) => Ok(f.to_path_buf()),
        None => load_config(cli)?
            .audit
            .path
            .ok_or_else(|| Failure::config("no audit location: give FILE or set [audit] path")),
    }
}

/// Every record of the chain `path` is the live file of.
fn read_records(path: &Path) -> Result<Vec<Map<String, Value>>, Failure> {
    if !path.exists() && chain::chain_files(path).is_empty() {
        return Err(cannot_read(
            path,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ));
    }
    chain::read_chain(path).map_err(|e| cannot_read(path, e))
}

fn cannot_read(path: &Path, e: std::io::Error) -> Failure {
    Failure::from_io(
        &e,
        FailureKind::Config,
        format!("cannot read audit log {}: {e}", path.display()),
    )
}

/// A filter with its times resolved to instants against one `now`.
struct Matcher<'a> {
    filter: &'a AuditFilter,
    since: Option<OffsetDateTime>,
    until: Option<OffsetDateTime>,
}

impl<'a> Matcher<'a> {
    fn new(filter: &'a AuditFilter, now: OffsetDateTime) -> Matcher<'a> {
        Matcher {
            filter,
            since: filter.since.map(|b| b.instant(now)),
            until: filter.until.map(|b| b.instant(now)),
        }
    }

    /// Every filter given matches. With a time bound, a record whose `ts`
    /// is not an RFC 3339 time matches none: nothing says when it was.
    fn matches(&self, r: &Map<String, Value>) -> bool {
        let in_window = || {
            if self.since.is_none() && self.until.is_none() {
                return true;
            }
            r.get("ts")
                .and_then(Value::as_str)
                .and_then(record_instant)
                .is_some_and(|at| {
                    self.since.is_none_or(|since| at >= since)
                        && self.until.is_none_or(|until| at < until)
                })
        };
        fields_match(r, self.filter) && in_window()
    }
}

/// The filters other than time.
fn fields_match(r: &Map<String, Value>, f: &AuditFilter) -> bool {
    let s = |k: &str| r.get(k).and_then(Value::as_str);
    f.connector
        .as_deref()
        .is_none_or(|c| s("connector") == Some(c))
        && f.op.as_deref().is_none_or(|o| s("op") == Some(o))
        && f.kind.is_none_or(|k| s("kind") == Some(k.as_str()))
        && f.reason.as_deref().is_none_or(|x| s("reason") == Some(x))
        && f.label.as_deref().is_none_or(|l| label_of(r) == Some(l))
        && f.uid.is_none_or(|u| {
            r.get("caller")
                .and_then(|c| c.get("uid"))
                .and_then(Value::as_u64)
                == Some(u64::from(u))
        })
        && f.pid.is_none_or(|p| {
            r.get("caller")
                .and_then(|c| c.get("pid"))
                .and_then(Value::as_u64)
                == Some(u64::from(p))
        })
        && f.audit_id
            .as_deref()
            .is_none_or(|id| s("audit_id") == Some(id))
        && f.signal
            .is_none_or(|n| r.get("signal").and_then(Value::as_i64) == Some(n))
        && (!f.timed_out || r.get("timed_out").and_then(Value::as_bool) == Some(true))
        && f.interrupted_by
            .as_deref()
            .is_none_or(|why| s("interrupted_by") == Some(why))
        && f.program_sha256.as_deref().is_none_or(|h| {
            r.get("program")
                .and_then(|p| p.get("sha256"))
                .and_then(Value::as_str)
                == Some(h)
        })
}

/// The label a spawn's caller gave it: its decision's and exit's
/// `caller.label`, an attach record's `label`.
fn label_of(r: &Map<String, Value>) -> Option<&str> {
    r.get("caller")
        .and_then(|c| c.get("label"))
        .or_else(|| r.get("label"))
        .and_then(Value::as_str)
}

/// A peer in words: `uid U gid G pid P` (`pid -` when the kernel did not
/// tell).
fn peer_words(p: &Value) -> String {
    let n = |k: &str| {
        p.get(k)
            .and_then(Value::as_u64)
            .map_or_else(|| "-".to_string(), |v| v.to_string())
    };
    format!("uid {} gid {} pid {}", n("uid"), n("gid"), n("pid"))
}

/// Who ended a program from outside, as an exit line says it: ` (spawn_kill
/// by uid U gid G pid P)`, ` (lease ran out)`, ` (shutdown)`, ` (SIGINT)`;
/// nothing when it ended on its own.
fn ended_from_outside(r: &Map<String, Value>) -> String {
    let Some(how) = r.get("interrupted_by").and_then(Value::as_str) else {
        return String::new();
    };
    match r.get("interrupted_by_peer").filter(|p| p.is_object()) {
        Some(peer) => format!(" ({} by {})", printable(how), peer_words(peer)),
        None if how == "lease" => " (lease ran out)".to_string(),
        None => format!(" ({})", printable(how)),
    }
}

/// What a `net` record says: a connection (where to, allowed or refused
/// and why, bytes each way) or a DNS name refused.
fn net_line(r: &Map<String, Value>) -> String {
    let s = |k: &str| printable(r.get(k).and_then(Value::as_str).unwrap_or("-")).into_owned();
    let n = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
    if s("protocol") == "dns" {
        return format!("net REFUSED dns {} {}", s("type"), s("query"));
    }
    let host = s("host");
    let to = if host.contains(':') {
        format!("[{host}]:{}", n("port"))
    } else {
        format!("{host}:{}", n("port"))
    };
    let allowed = r.get("allowed").and_then(Value::as_bool) == Some(true);
    let connected = r.get("connected").and_then(Value::as_bool) == Some(true);
    match (allowed, connected) {
        (true, true) => format!(
            "net {to} via {} up {} down {}{}",
            s("dialed"),
            n("bytes_up"),
            n("bytes_down"),
            r.get("reason")
                .and_then(Value::as_str)
                .map(|why| format!(" ({})", printable(why)))
                .unwrap_or_default()
        ),
        (true, false) => format!("net {to} failed ({})", s("reason")),
        (false, true) => format!(
            "net REFUSED {to} ({}) after dialing {}, down {}",
            s("reason"),
            s("dialed"),
            n("bytes_down")
        ),
        (false, false) => format!("net REFUSED {to} ({})", s("reason")),
    }
}

/// A daemon's start, reload or stop.
fn lifecycle_line(r: &Map<String, Value>) -> String {
    let s = |k: &str| printable(r.get(k).and_then(Value::as_str).unwrap_or("-")).into_owned();
    let n = |k: &str| r.get(k).and_then(Value::as_array).map_or(0, Vec::len);
    let pid = r.get("pid").and_then(Value::as_u64).unwrap_or(0);
    match s("event").as_str() {
        "start" => {
            let left = n("unfinished") as u64
                + r.get("unfinished_more")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
            let left = match left {
                0 => String::new(),
                k => format!(", {k} spawn(s) of an earlier daemon left without an exit"),
            };
            format!(
                "daemon start pid {pid} serving {} manifest(s){left}",
                n("manifests")
            )
        }
        "reload" if s("outcome") == "refused" => {
            format!("daemon reload REFUSED pid {pid}: {}", s("error"))
        }
        "reload" => format!(
            "daemon reload pid {pid}: {} added, {} removed, {} changed",
            n("added"),
            n("removed"),
            n("changed")
        ),
        "stop" => format!("daemon stop pid {pid} ({})", s("signal")),
        other => format!("daemon {other} pid {pid}"),
    }
}

/// One human line per record. Every field is escaped ([`printable`]): a
/// record can hold text a caller or an editor of the file chose, and it must
/// not add a line or reach the terminal as control codes.
fn one_line(r: &Map<String, Value>) -> String {
    let s = |k: &str| printable(r.get(k).and_then(Value::as_str).unwrap_or("-")).into_owned();
    let what = match s("kind").as_str() {
        "decision" => format!(
            "allowed {} {}",
            s("op"),
            printable(r.get("argv_shape").and_then(Value::as_str).unwrap_or(""))
        ),
        "denial" => format!("DENIED {} ({}){}", s("op"), s("reason"), refusal_detail(r)),
        "exit" => match (
            r.get("exit_code").and_then(Value::as_i64),
            r.get("signal").and_then(Value::as_i64),
        ) {
            (Some(c), _) => format!("exit {c}{}{}", timed_out(r), ended_from_outside(r)),
            (None, Some(sig)) => {
                format!("signal {sig}{}{}", timed_out(r), ended_from_outside(r))
            }
            _ if r.get("failed").is_some() => format!("failed: {}", s("failed")),
            _ => format!("setup failed: {}", s("setup_failed")),
        },
        "attach" => format!(
            "attached {} by {} ({})",
            s("op"),
            peer_words(r.get("caller").unwrap_or(&Value::Null)),
            s("state")
        ),
        "net" => net_line(r),
        "lifecycle" => lifecycle_line(r),
        "heartbeat" => format!(
            "heartbeat pid {} ({} running)",
            r.get("pid").and_then(Value::as_u64).unwrap_or(0),
            r.get("running").and_then(Value::as_u64).unwrap_or(0)
        ),
        other => format!("{other}: {}", s("note")),
    };
    let label = label_of(r)
        .map(|l| format!(" label {}", printable(l)))
        .unwrap_or_default();
    // Who asked: the caller of a decision, denial or exit (an attach
    // names its peer above).
    let caller = match (s("kind").as_str(), r.get("caller")) {
        ("decision" | "denial" | "exit", Some(c)) => {
            let id = |k: &str| c.get(k).and_then(Value::as_u64);
            match (id("uid"), id("pid")) {
                (Some(uid), Some(pid)) => format!(" uid {uid} pid {pid}"),
                (Some(uid), None) => format!(" uid {uid}"),
                _ => String::new(),
            }
        }
        _ => String::new(),
    };
    format!(
        "{} #{} {} {}{}{} {}",
        s("ts"),
        r.get("seq").and_then(Value::as_u64).unwrap_or(0),
        s("connector"),
        what,
        label,
        caller,
        s("audit_id")
    )
}

/// ` (timed out)` for an exit record of a program that ran out of its
/// wall time.
fn timed_out(r: &Map<String, Value>) -> &'static str {
    if r.get("timed_out") == Some(&Value::Bool(true)) {
        " (timed out)"
    } else {
        ""
    }
}

/// What a daemon's refusal record adds to its line: the method refused
/// (other than a spawn), the field found invalid and its length, and for a
/// record of repeats how many it counts.
fn refusal_detail(r: &Map<String, Value>) -> String {
    let mut out = String::new();
    if let Some(m) = r.get("method").and_then(Value::as_str) {
        if m != "spawn" && m != "spawn_op" {
            out.push_str(&format!(" method {}", printable(m)));
        }
    }
    if let (Some(field), Some(bytes)) = (
        r.get("invalid")
            .and_then(|i| i.get("field"))
            .and_then(Value::as_str),
        r.get("invalid")
            .and_then(|i| i.get("bytes"))
            .and_then(Value::as_u64),
    ) {
        out.push_str(&format!(" invalid {} of {bytes} bytes", printable(field)));
    }
    if let Some(count) = r
        .get("repeats")
        .and_then(|x| x.get("count"))
        .and_then(Value::as_u64)
    {
        out.push_str(&format!(" x{count} repeats"));
    }
    out
}

fn listing(records: &[&Map<String, Value>]) -> Success {
    let text = records
        .iter()
        .map(|r| one_line(r))
        .collect::<Vec<_>>()
        .join("\n");
    Success::new(json!({"records": records}), text)
}

/// `spawnd audit tail [-n N | --from-seq S] [-f]`.
pub(super) fn tail(
    cli: &Cli,
    file: Option<&Path>,
    n: usize,
    follow: bool,
    from_seq: Option<u64>,
) -> Result<Success, Failure> {
    let path = log_path(cli, file)?;
    let records = read_records(&path)?;
    let first = match from_seq {
        Some(seq) => records
            .iter()
            .position(|r| r.get("seq").and_then(Value::as_u64).unwrap_or(0) >= seq)
            .unwrap_or(records.len()),
        None => records.len().saturating_sub(n),
    };
    let shown: Vec<&Map<String, Value>> = records.iter().skip(first).collect();
    if !follow {
        return Ok(listing(&shown));
    }
    let print = |r: &Map<String, Value>| {
        if cli.json {
            print_line(&Value::Object(r.clone()).to_string());
        } else {
            print_line(&one_line(r));
        }
    };
    shown.iter().for_each(|r| print(r));
    // Follow from the last record read, across rotations, each record once.
    let last = records
        .last()
        .and_then(|r| r.get("seq"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let mut follower = chain::Follower::after(&path, last);
    loop {
        follower
            .poll()
            .map_err(|e| cannot_read(&path, e))?
            .iter()
            .for_each(print);
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// `spawnd audit keygen FILE`: 32 random bytes as 64 hex digits and a
/// newline, in a new file of mode 0600.
pub(super) fn keygen(file: &Path) -> Result<Success, Failure> {
    let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
    getrandom::fill(bytes.as_mut_slice())
        .map_err(|e| Failure::internal(format!("getrandom: {e}")))?;
    let mut key = zeroize::Zeroizing::new(hex::encode(bytes.as_slice()));
    key.push('\n');
    write_new_key(file, key.as_bytes())?;
    Ok(Success::new(
        json!({"file": file}),
        format!(
            "wrote a 256-bit key to {} (mode 0600); set [audit] hmac_key_file = \"{}\"",
            file.display(),
            file.display()
        ),
    ))
}

/// Writes a key to a new file of mode 0600; an existing file is never
/// overwritten.
pub(super) fn write_new_key(file: &Path, key: &[u8]) -> Result<(), Failure> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .and_then(|mut f| f.write_all(key).and_then(|()| f.sync_all()));
    written.map_err(|e| {
        Failure::from_io(
            &e,
            FailureKind::Config,
            format!(
                "cannot write a new key to {}: {e}{}",
                file.display(),
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    " (an existing key is never overwritten: what was sealed or signed with it verifies only with it)"
                } else {
                    ""
                }
            ),
        )
    })
}

/// `spawnd audit query …`.
pub(super) fn query(
    cli: &Cli,
    file: Option<&Path>,
    filter: &AuditFilter,
) -> Result<Success, Failure> {
    let records = read_records(&log_path(cli, file)?)?;
    let matcher = Matcher::new(filter, OffsetDateTime::now_utc());
    let hits: Vec<&Map<String, Value>> = records.iter().filter(|r| matcher.matches(r)).collect();
    Ok(listing(&hits))
}

/// `spawnd audit export --format ocsf [--follow]`: one OCSF event per line.
/// Every record of the chain passes through the exporter, those the filter
/// leaves out too: a spawn's decision fills its later events.
pub(super) fn export(
    cli: &Cli,
    file: Option<&Path>,
    filter: &AuditFilter,
    follow: bool,
) -> Result<Success, Failure> {
    let path = log_path(cli, file)?;
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut exporter = Exporter::new(&host);
    if follow {
        let mut follower = chain::Follower::after(&path, 0);
        loop {
            let matcher = Matcher::new(filter, OffsetDateTime::now_utc());
            for record in follower.poll().map_err(|e| cannot_read(&path, e))? {
                let event = exporter.event(&record);
                if matcher.matches(&record) {
                    print_line(&event.to_string());
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }
    let records = read_records(&path)?;
    let matcher = Matcher::new(filter, OffsetDateTime::now_utc());
    let events: Vec<Value> = records
        .iter()
        .map(|r| (exporter.event(r), matcher.matches(r)))
        .filter_map(|(event, wanted)| wanted.then_some(event))
        .collect();
    let text = events
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Success::new(json!({"events": events}), text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(v: Value) -> Map<String, Value> {
        serde_json::from_value(v).unwrap()
    }

    /// A labelled spawn's decision, attach and exit, another spawn's
    /// decision, and a `net` record of the labelled spawn (which carries no
    /// label).
    fn log() -> Vec<Map<String, Value>> {
        vec![
            record(
                json!({"kind": "decision", "seq": 1, "ts": "2026-11-22T01:00:00.000Z", "audit_id": "a1", "connector": "local://t/x", "op": "sh", "argv_shape": "sh -c {script}", "caller": {"uid": 1000, "gid": 1000, "pid": 7, "label": "ci-job-7"}}),
            ),
            record(
                json!({"kind": "decision", "seq": 2, "ts": "2026-11-22T01:00:01.000Z", "audit_id": "b2", "connector": "local://t/x", "op": "sh", "caller": {"uid": 1000, "gid": 1000, "pid": 8, "label": "ci-job-8"}}),
            ),
            record(
                json!({"kind": "net", "seq": 3, "ts": "2026-11-22T01:00:02.000Z", "audit_id": "a1", "connector": "local://t/x", "op": "sh", "protocol": "dns", "query": "x.example", "type": "A"}),
            ),
            record(
                json!({"kind": "attach", "seq": 4, "ts": "2026-11-22T01:00:03.000Z", "audit_id": "a1", "connector": "local://t/x", "op": "sh", "caller": {"uid": 1000, "gid": 1000, "pid": 99}, "label": "ci-job-7", "state": "running"}),
            ),
            record(
                json!({"kind": "exit", "seq": 5, "ts": "2026-11-22T01:00:04.000Z", "audit_id": "a1", "connector": "local://t/x", "op": "sh", "caller": {"uid": 1000, "gid": 1000, "pid": 7, "label": "ci-job-7"}, "exit_code": null, "signal": 9, "interrupted_by": "spawn_kill", "interrupted_by_peer": {"uid": 1000, "gid": 1000, "pid": 99}}),
            ),
        ]
    }

    fn seqs(filter: &AuditFilter) -> Vec<u64> {
        let records = log();
        let m = Matcher::new(filter, OffsetDateTime::now_utc());
        records
            .iter()
            .filter(|r| m.matches(r))
            .filter_map(|r| r.get("seq").and_then(Value::as_u64))
            .collect()
    }

    #[test]
    fn the_label_filter_finds_a_spawns_decision_attach_and_exit_and_nothing_else() {
        let label = |l: &str| AuditFilter {
            label: Some(l.to_string()),
            ..AuditFilter::default()
        };
        assert_eq!(seqs(&label("ci-job-7")), [1, 4, 5]);
        assert_eq!(seqs(&label("ci-job-8")), [2]);
        // Exactly the label: no prefix, no other case.
        assert!(seqs(&label("ci-job")).is_empty());
        assert!(seqs(&label("CI-JOB-7")).is_empty());
        // With the other filters, every one must match.
        let exits = AuditFilter {
            label: Some("ci-job-7".into()),
            kind: Some(crate::audit::Kind::Exit),
            ..AuditFilter::default()
        };
        assert_eq!(seqs(&exits), [5]);
        assert_eq!(seqs(&AuditFilter::default()), [1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_line_shows_the_label_who_took_a_spawn_up_and_who_ended_it() {
        let records = log();
        let lines: Vec<String> = records.iter().map(one_line).collect();
        assert_eq!(
            lines[0],
            "2026-11-22T01:00:00.000Z #1 local://t/x allowed sh sh -c {script} label ci-job-7 uid 1000 pid 7 a1"
        );
        assert_eq!(
            lines[3],
            "2026-11-22T01:00:03.000Z #4 local://t/x attached sh by uid 1000 gid 1000 pid 99 (running) label ci-job-7 a1"
        );
        assert_eq!(
            lines[4],
            "2026-11-22T01:00:04.000Z #5 local://t/x signal 9 (spawn_kill by uid 1000 gid 1000 pid 99) label ci-job-7 uid 1000 pid 7 a1"
        );
        let ended = |fields: Value| {
            let mut r = records[4].clone();
            r.remove("interrupted_by_peer");
            r.extend(record(fields));
            one_line(&r)
        };
        assert!(ended(json!({"interrupted_by": "lease"}))
            .contains("signal 9 (lease ran out) label ci-job-7 uid 1000 pid 7"));
        assert!(ended(json!({"interrupted_by": "shutdown"})).contains("signal 9 (shutdown) label"));
        // A program its wall time killed says so.
        assert!(ended(json!({"interrupted_by": null, "timed_out": true}))
            .contains("signal 9 (timed out) label ci-job-7 uid 1000 pid 7"));
        assert!(ended(json!({"interrupted_by": "disconnect", "interrupted_by_peer": {"uid": 0, "gid": 0, "pid": null}})).contains("(disconnect by uid 0 gid 0 pid -)"));
        assert!(
            ended(json!({"interrupted_by": null, "signal": null, "exit_code": 0}))
                .contains(" exit 0 label ci-job-7 uid 1000 pid 7 ")
        );
        // A label is escaped like every other field: it adds no line.
        let mut forged = records[0].clone();
        forged["caller"]["label"] = json!("x\n2026 #9 forged");
        assert!(!one_line(&forged).contains('\n'), "{}", one_line(&forged));
    }

    #[test]
    fn an_analyst_filters_by_spawn_pid_signal_and_who_ended_it() {
        let f = |edit: &dyn Fn(&mut AuditFilter)| {
            let mut filter = AuditFilter::default();
            edit(&mut filter);
            seqs(&filter)
        };
        assert_eq!(f(&|x| x.audit_id = Some("a1".into())), [1, 3, 4, 5]);
        assert_eq!(f(&|x| x.pid = Some(7)), [1, 5]);
        assert_eq!(f(&|x| x.signal = Some(9)), [5]);
        assert_eq!(f(&|x| x.interrupted_by = Some("spawn_kill".into())), [5]);
        assert!(f(&|x| x.timed_out = true).is_empty());
        assert!(f(&|x| x.signal = Some(15)).is_empty());
    }

    #[test]
    fn a_program_hash_without_its_prefix_is_taken_and_anything_else_is_refused() {
        let hex = "AB".repeat(32);
        let full = format!("sha256:{}", hex.to_ascii_lowercase());
        assert_eq!(super::super::args::parse_sha256(&hex).unwrap(), full);
        assert_eq!(super::super::args::parse_sha256(&full).unwrap(), full);
        for bad in ["ab", "sha256:", "sha512:00", &format!("{hex}0")] {
            assert!(super::super::args::parse_sha256(bad).is_err(), "{bad}");
        }
    }
}
