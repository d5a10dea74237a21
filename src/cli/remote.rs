//! `spawnd run --socket S`: the request `run` would make, sent to a daemon
//! (`spawnd serve`) over its JSON-RPC socket (docs/daemon.md) instead of run in this
//! process. The daemon's loaded manifest and config apply. Output streams live
//! (or comes back as the `--json` result), and the exit code follows the child
//! exactly as in-process `run` does; a refusal carries the daemon's denial.
//! `spawnd check --socket S` sends the same request to `spawn_check`, and
//! `spawnd connectors --socket S` asks for `connectors_status`.

use std::io::Read;
use std::path::Path;

use serde_json::{json, Value};

use super::args::{Cli, RunArgs};
use super::check::request_of;
use super::context::{load_config, load_manifest};
use super::output::{print_notice, Failure};
use crate::client::{call_for, interrupted, watch_interruptions, Client};
use crate::failure::FailureKind;
use crate::pipeline::{conclude, Concluded};
use crate::spawn_result::SpawnStatus;

/// `spawnd run --socket S`.
pub(super) fn run_remote(cli: &Cli, args: &RunArgs, socket: &Path) -> Result<Concluded, Failure> {
    let (method, params) = remote_call(cli, args, true)?;
    watch_interruptions()?;
    let mut client = Client::connect(socket)?;
    let handle = answer_as::<Spawned>(method, client.call(method, params)?)?.handle;
    if let Some(mut live) = super::run::live_output(cli.json, args.live) {
        client.stream(&handle, live.as_mut())?;
    }
    // Short waits, so that an interruption is acted on at once: the
    // program is killed (through the daemon there is no grace period), and
    // its result says who ended it, as in-process `run`'s does.
    let mut killed_for = None;
    let status = loop {
        if let (Some(sig), None) = (interrupted(), killed_for) {
            client.call("spawn_kill", json!({ "handle": handle }))?;
            killed_for = Some(sig);
        }
        let s = client.call("spawn_status", json!({"handle": handle, "wait_ms": 200}))?;
        match answer_as::<SpawnStatus>("spawn_status", s)? {
            SpawnStatus::Running { .. } => continue,
            ended => break ended,
        }
    };
    // Freed at once rather than after the daemon's handle lifetime.
    let _ = client.call("spawn_release", json!({ "handle": handle }));
    let mut result = match status {
        SpawnStatus::Failed { error } => return Err(Failure::sandbox_unavailable(error)),
        SpawnStatus::Running { .. } => unreachable!("the loop ends on an ended status"),
        SpawnStatus::Exited(r) | SpawnStatus::Signaled(r) | SpawnStatus::TimedOut(r) => r,
    };
    if let Some(sig) = killed_for {
        result.interrupted_by = Some(
            nix::sys::signal::Signal::try_from(sig)
                .map_or("SIGINT", |s| s.as_str())
                .to_string(),
        );
    }
    Ok(conclude(cli.json, result, &print_notice))
}

/// The part of a spawn's answer `run --socket` reads.
#[derive(serde::Deserialize)]
struct Spawned {
    handle: String,
}

/// The daemon's answer to `method` read as `T`.
fn answer_as<T: serde::de::DeserializeOwned>(method: &str, answer: Value) -> Result<T, Failure> {
    serde_json::from_value(answer)
        .map_err(|e| Failure::internal(format!("the daemon's {method} answer: {e}")))
}

/// `spawnd check --socket S`: the daemon's `spawn_check` for the request
/// `run --socket` would send (stdin aside: the gate does not read it). The
/// answer is the allowed plan; a denial is the daemon's error.
pub(super) fn check_remote(cli: &Cli, args: &RunArgs, socket: &Path) -> Result<Value, Failure> {
    let (_, params) = remote_call(cli, args, false)?;
    Client::connect(socket)?.call("spawn_check", params)
}

/// `spawnd connectors --socket S`: the daemon's `connectors_status`, the
/// status of the manifests it has loaded (not the files on disk, which it
/// reads again only on a reload) for the connectors this caller may act
/// for, shown as in-process `connectors` shows its own.
pub(super) fn connectors_remote(
    socket: &Path,
) -> Result<crate::connectors::ConnectorsStatus, Failure> {
    let status = Client::connect(socket)?.call("connectors_status", json!({}))?;
    answer_as("connectors_status", status)
}

/// The connector (`--connector`, or the one `--manifest` names), and the
/// JSON-RPC method and params of the request the arguments describe, with
/// `--stdin-file` read into it when `with_stdin`.
fn remote_call(
    cli: &Cli,
    args: &RunArgs,
    with_stdin: bool,
) -> Result<(&'static str, Value), Failure> {
    if args.workspace.is_some() {
        return Err(Failure::usage(
            "--workspace names the workspace for a run in this process; through --socket the daemon's [sandbox] workspace applies, and its callers never name one",
        ));
    }
    let mut pin = crate::policy::ConnectorPin::default();
    let (connector, manifest) = match (&args.connector, &args.manifest) {
        (Some(named), _) => {
            let (fqn, version) = match named.rsplit_once('@') {
                Some((fqn, version)) => (fqn, Some(version)),
                None => (named.as_str(), None),
            };
            crate::manifest::Fqn::parse(fqn)
                .map_err(|why| Failure::usage(format!("--connector is not a valid FQN: {why}")))?;
            pin.version = version
                .map(crate::provenance::identity::parse_strict_version)
                .transpose()
                .map_err(|why| Failure::usage(format!("--connector's version: {why}")))?;
            (fqn.to_string(), None)
        }
        (None, Some(path)) => {
            let m = load_manifest(path, &load_config(cli)?)?;
            (m.connector.name.to_string(), Some(m))
        }
        (None, None) => {
            return Err(Failure::usage(
                "with --socket, name the connector: --connector FQN or --manifest FILE",
            ))
        }
    };
    pin.hash = args
        .connector_hash
        .as_deref()
        .map(str::parse::<crate::manifest::Sha256Digest>)
        .transpose()
        .map_err(|why| Failure::usage(format!("--connector-hash {why}")))?;
    let mut request = request_of(cli, args, manifest.as_ref())?;
    request.pin = pin;
    let stdin = if with_stdin {
        read_stdin(args.stdin_file.as_deref())?
    } else {
        None
    };
    let (method, mut params) = call_for(&connector, request, stdin, args.timeout);
    if let Some(label) = super::check::label_of(args.label.as_deref())? {
        params["label"] = json!(label);
    }
    Ok((method, params))
}

/// `--stdin-file F` (or `-`) read whole: it travels inside the request.
fn read_stdin(path: Option<&Path>) -> Result<Option<Vec<u8>>, Failure> {
    let Some(path) = path else { return Ok(None) };
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin().lock().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes).map(|_| ()))
    };
    read.map_err(|e| {
        Failure::from_io(
            &e,
            FailureKind::Usage,
            format!("--stdin-file {}: {e}", path.display()),
        )
    })?;
    Ok(Some(bytes))
}
