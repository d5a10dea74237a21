//! A client of the daemon's socket (`spawnd serve`, docs/daemon.md): one
//! connection, JSON-RPC requests one at a time, a request as the method and
//! params the daemon expects, and a spawn's output followed as it grows.
//! Errors come back as spawnd's [`Failure`], with the exit code docs/cli.md
//! gives for the daemon's error code. `spawnd run --socket` is built on it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use base64::Engine;
use serde_json::{json, Map, Value};

use crate::failure::{Failure, FailureKind};
use crate::policy::{Request, RequestKind};
use crate::supervise::LiveOutput;

/// How long one `spawn_output_read` waits for new bytes while the child is quiet.
const QUIET_WAIT_MS: u64 = 200;
/// The most bytes asked for in one read (the daemon's own cap).
const READ_LEN: u64 = 1 << 20;

/// The JSON-RPC method and params for a request.
pub(crate) fn call_for(
    connector: &str,
    request: Request,
    stdin: Option<Vec<u8>>,
    timeout_ms: Option<u64>,
) -> (&'static str, Value) {
    let stdin_b64 = stdin.map(|b| base64::engine::general_purpose::STANDARD.encode(b));
    let mut params = Map::new();
    params.insert("connector".into(), json!(connector));
    params.insert("mode".into(), json!(request.mode));
    if let Some(v) = &request.pin.version {
        params.insert("version".into(), json!(v.to_string()));
    }
    if let Some(h) = &request.pin.hash {
        params.insert("hash".into(), json!(h.to_string()));
    }
    if let Some(t) = timeout_ms {
        params.insert("timeout_ms".into(), json!(t));
    }
    let method = match request.kind {
        RequestKind::Op { name, args } => {
            params.insert("op".into(), json!(name));
            params.insert("args".into(), json!(args));
            params.insert("env".into(), json!(request.env));
            if let Some(cwd) = request.cwd {
                params.insert("cwd".into(), json!(cwd));
            }
            if let Some(b) = stdin_b64 {
                params.insert("stdin_b64".into(), json!(b));
            }
            "spawn_op"
        }
        RequestKind::Raw { program, argv } => {
            let mut envelope = json!({"program": program, "argv": argv, "env": request.env});
            if let Some(cwd) = request.cwd {
                envelope["cwd"] = json!(cwd);
            }
            if let Some(b) = stdin_b64 {
                envelope["stdin_b64"] = json!(b);
            }
            params.insert("envelope".into(), envelope);
            "spawn"
        }
    };
    (method, Value::Object(params))
}

/// The signal (SIGINT, SIGTERM or SIGHUP) that interrupted this process, if
/// one did: set by [`watch_interruptions`], looked at between requests.
static INTERRUPTED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The signal that interrupted this process, if one did.
pub(crate) fn interrupted() -> Option<i32> {
    match INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        sig => Some(sig),
    }
}

/// Takes SIGINT, SIGTERM and SIGHUP on a thread of their own from now on
/// (they are blocked in the caller, and so in threads it starts later):
/// each is noted for [`interrupted`] instead of ending the process, so a
/// client can end what it started and exit as `run` does (128 + N).
pub(crate) fn watch_interruptions() -> Result<(), Failure> {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal};
    let mut set = SigSet::empty();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(sig);
    }
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None)
        .map_err(|e| Failure::internal(format!("block SIGINT/SIGTERM/SIGHUP: {e}")))?;
    std::thread::Builder::new()
        .name("spawnd-signals".into())
        .spawn(move || {
            while let Ok(sig) = set.wait() {
                INTERRUPTED.store(sig as i32, std::sync::atomic::Ordering::Relaxed);
            }
        })
        .map_err(|e| Failure::internal(format!("the signal thread: {e}")))?;
    Ok(())
}

/// One connection to the daemon: a request line out, its answer line back.
pub(crate) struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

impl Client {
    /// Connects to the daemon's socket.
    pub(crate) fn connect(socket: &Path) -> Result<Client, Failure> {
        let stream = UnixStream::connect(socket).map_err(|e| {
            Failure::new(
                FailureKind::DaemonUnavailable,
                format!(
                    "daemon unavailable at {}: {e}; start it with `spawnd serve` or drop --socket to run in this process",
                    socket.display()
                ),
            )
        })?;
        let writer = stream
            .try_clone()
            .map_err(|e| Failure::internal(format!("socket: {e}")))?;
        Ok(Client {
            reader: BufReader::new(stream),
            writer,
            next_id: 1,
        })
    }

    /// The result of `method`, or its error as spawnd's failure (docs/cli.md).
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Result<Value, Failure> {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let lost = |e: std::io::Error| {
            Failure::new(
                FailureKind::DaemonUnavailable,
                format!("the daemon closed the connection during {method}: {e}"),
            )
        };
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(lost)?;
        let mut answer = String::new();
        let n = self.reader.read_line(&mut answer).map_err(lost)?;
        if n == 0 {
            return Err(lost(std::io::ErrorKind::UnexpectedEof.into()));
        }
        let mut v: Value = serde_json::from_str(&answer)
            .map_err(|e| Failure::internal(format!("the daemon's answer to {method}: {e}")))?;
        if v["id"] != json!(id) {
            return Err(Failure::internal(format!(
                "the daemon answered id {} to request {id}",
                v["id"]
            )));
        }
        if let Some(e) = v.get("error") {
            return Err(failure_of(e));
        }
        Ok(v["result"].take())
    }

    /// Forwards both streams of `handle` to `sink` as they grow, until both end.
    pub(crate) fn stream(
        &mut self,
        handle: &str,
        sink: &mut dyn LiveOutput,
    ) -> Result<(), Failure> {
        let mut offset = [0u64; 2];
        let mut ended = [false; 2];
        let mut quiet = false;
        while !(ended[0] && ended[1]) {
            if interrupted().is_some() {
                return Ok(());
            }
            let mut waited = false;
            let mut got = false;
            for which in 0..2u8 {
                let w = usize::from(which);
                if ended[w] {
                    continue;
                }
                // The connection answers one request at a time: only the first
                // open stream waits, and only after a round with no output.
                let wait_ms = if quiet && !waited { QUIET_WAIT_MS } else { 0 };
                waited = true;
                let r = self.call(
                    "spawn_output_read",
                    json!({"handle": handle, "which": which, "offset": offset[w], "len": READ_LEN, "wait_ms": wait_ms}),
                )?;
                let data = base64::engine::general_purpose::STANDARD
                    .decode(r["data_b64"].as_str().unwrap_or_default())
                    .map_err(|e| Failure::internal(format!("the daemon's output: {e}")))?;
                let skipped = r["skipped"].as_u64().unwrap_or(0);
                if skipped > 0 {
                    got = true;
                    offset[w] += skipped;
                    sink.skipped(which, skipped);
                }
                if !data.is_empty() {
                    got = true;
                    offset[w] += data.len() as u64;
                    sink.chunk(which, &data);
                }
                ended[w] = r["eof"] == json!(true);
            }
            quiet = !got;
        }
        Ok(())
    }
}

/// A JSON-RPC error as spawnd's failure: the exit code of docs/cli.md for its
/// code, the daemon's message, and the denial object as details.
fn failure_of(error: &Value) -> Failure {
    let kind = crate::rpc::kind_of(error["code"].as_i64().unwrap_or(0));
    let message = error["message"]
        .as_str()
        .unwrap_or("the daemon refused the request")
        .to_string();
    let mut failure = Failure::new(kind, message);
    if let Some(data) = error.get("data").filter(|d| !d.is_null()) {
        failure.details = Some(data.clone());
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Tier;
    use std::collections::BTreeMap;

    #[test]
    fn an_op_request_becomes_spawn_op_with_every_field() {
        let request = Request {
            kind: RequestKind::Op {
                name: "status".into(),
                args: BTreeMap::from([("since".into(), "2026-01-01".into())]),
            },
            env: BTreeMap::from([("LANG".into(), "C".into())]),
            cwd: Some("/srv/repo".into()),
            action: None,
            mode: Tier::Write,
            pin: Default::default(),
        };
        let (method, params) = call_for(
            "local://x/git",
            request,
            Some(b"\xff\x00".to_vec()),
            Some(500),
        );
        assert_eq!(method, "spawn_op");
        assert_eq!(
            params,
            json!({"connector": "local://x/git", "mode": "write", "timeout_ms": 500,
                   "op": "status", "args": {"since": "2026-01-01"}, "env": {"LANG": "C"},
                   "cwd": "/srv/repo", "stdin_b64": "/wA="})
        );
    }

    #[test]
    fn a_raw_request_becomes_spawn_with_an_envelope() {
        let request = Request {
            kind: RequestKind::Raw {
                program: "/usr/bin/git".into(),
                argv: vec!["git".into(), "status".into()],
            },
            env: BTreeMap::new(),
            cwd: None,
            action: None,
            mode: Tier::Readonly,
            pin: crate::policy::ConnectorPin {
                version: Some(semver::Version::new(1, 2, 3)),
                hash: None,
            },
        };
        let (method, params) = call_for("local://x/git", request, None, None);
        assert_eq!(method, "spawn");
        assert_eq!(
            params,
            json!({"connector": "local://x/git", "mode": "readonly", "version": "1.2.3",
                   "envelope": {"program": "/usr/bin/git", "argv": ["git", "status"], "env": {}}})
        );
    }

    #[test]
    fn rpc_error_codes_map_to_the_exit_codes_of_docs_cli() {
        let cases = [
            (-32001, 3),
            (-32002, 6),
            (-32003, 5),
            (-32004, 5),
            (-32005, 4),
            (-32006, 5),
            (-32602, 2),
            (-32603, 10),
        ];
        for (code, exit) in cases {
            let f = failure_of(&json!({"code": code, "message": "m", "data": {"reason": "r"}}));
            assert_eq!(f.exit(), exit, "code {code}");
            assert_eq!(f.details, Some(json!({"reason": "r"})));
        }
    }
}
