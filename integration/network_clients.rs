//! Network grants end to end with real clients: curl over HTTP and HTTPS
//! (a CA made for the test), `git clone` over smart HTTP (`git
//! http-backend`), python's urllib and `pip download` from a local HTTPS
//! index (pip refuses a plain-HTTP index that is not on loopback), and
//! bash's `/dev/tcp`, which ignores proxy variables. Each runs in spawnd's
//! sandbox and reaches test servers by name: spawnd runs inside a world
//! network namespace the test creates (`world.rs`), whose DNS server the
//! test controls, so it resolves the test's names (`api.test`,
//! `git.test`, `pypi.test`) there and dials the servers on the world's
//! internet at 203.0.113.10 (a documentation range, allowed by the test's
//! `[network] allow_cidrs`). Also: what a client sees when the
//! operator did not allow that range, when a granted name does not resolve
//! or nothing listens, when its IPv6 address is unreachable, and with a
//! large download.
//!
//! Judged from outside: what the servers accepted and logged, the files
//! a client left on the host, the world DNS server's question log, spawnd's
//! exit code (the client's own) and the result's `network` object. As root
//! (the program runs as 65534), once with spawnd itself as `nobody`, and
//! once through the daemon.

use crate::world;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;
use serde_json::Value;
use world::{run_checked, server_log, Run, World, PYTHON, WORLD_CIDR, WORLD_IP};

/// A client's own timeout: far above what any step takes, below the
/// manifest's wall time, so a hang shows as the client's error.
const CLIENT_TIMEOUT_S: u32 = 60;

fn world_ip() -> IpAddr {
    WORLD_IP.parse().unwrap()
}

/// The operator config the tests run spawnd with: the world's range is
/// one a granted name may resolve to.
fn config(world: &World) -> PathBuf {
    world.operator_config(
        "spawnd",
        &format!("[network]\nallow_cidrs = [\"{WORLD_CIDR}\"]\n"),
    )
}

/// A manifest `<file>` in the world's directory: connector
/// `local://test/clients`, a wall time above every client's timeout, and
/// `spawn` (the `[capabilities.spawn]` body: programs, scopes, network,
/// operations).
fn manifest(world: &World, file: &str, spawn: &str) -> PathBuf {
    let path = world.path(file);
    std::fs::write(
        &path,
        format!(
            "[connector]\nname = \"local://test/clients\"\nversion = \"1.0.0\"\n\n\
             [capabilities.spawn]\n{spawn}\n\
             [capabilities.spawn.limits]\nwall_time_ms = 120000\n"
        ),
    )
    .unwrap();
    path
}

/// `spawnd run --json --manifest M --op OP --arg …`, inside the world.
fn run(world: &World, config: &Path, manifest: &Path, op: &str, args: &[String]) -> Run {
    let mut command = world.spawnd(config);
    run_op(&mut command, manifest, op, args)
}

fn run_op(command: &mut Command, manifest: &Path, op: &str, args: &[String]) -> Run {
    command.args(["run", "--json", "--manifest"]).arg(manifest);
    command.args(["--op", op]);
    for arg in args {
        command.args(["--arg", arg]);
    }
    Run::of(command)
}

#[test]
fn curl_fetches_a_granted_name_over_http_and_an_ungranted_port_of_it_fails_at_once() {
    let Some(world) = World::new() else { return };
    world.map("api.test", &[world_ip()]);
    let granted = world.http_server(8080, "hello from api.test");
    let other = world.http_server(8081, "never served");
    let config = config(&world);
    let m = manifest(
        &world,
        "curl.toml",
        &format!(
            "programs = [{{ path = \"/usr/bin/curl\" }}]\n\
             network = [\"api.test:8080\"]\n\n\
             [capabilities.spawn.operations.get]\n\
             argv = \"curl -sS --max-time {CLIENT_TIMEOUT_S} {{url}}\"\n\n\
             [capabilities.spawn.operations.where]\n\
             argv = \"curl -sS -o /dev/null --max-time {CLIENT_TIMEOUT_S} \
                     --write-out %{{{{remote_ip}}}} {{url}}\"\n"
        ),
    );

    let ok = run(
        &world,
        &config,
        &m,
        "get",
        &["url=http://api.test:8080/".into()],
    );
    assert_eq!(ok.code(), Some(0), "{}", ok.json);
    assert_eq!(ok.stdout(), "hello from api.test", "{}", ok.json);
    assert_eq!(granted.accepted(), 1, "{}", ok.json);
    let network = ok.network();
    assert_eq!(network["connections"], 1, "{network}");
    assert_eq!(network["refused"], 0, "{network}");
    let c = ok.connections()[0];
    assert_eq!(c["allowed"], true, "{c}");
    assert_eq!(c["host"], "api.test", "{c}");
    assert_eq!(c["dialed"], format!("{WORLD_IP}:8080"), "{c}");
    // spawnd resolved the name itself, through the world's resolver; the
    // program's own questions went to the sandbox's stub, which never
    // forwards, so the world heard of no other name.
    let queries = world.dns_queries();
    assert!(
        queries
            .iter()
            .any(|q| q.name == "api.test" && q.record_type == RecordType::A),
        "{queries:?}"
    );
    assert!(queries.iter().all(|q| q.name == "api.test"), "{queries:?}");

    // Where the program thought it connected: the name's address in the
    // sandbox's fake pool, never the world's own.
    let seen = run(
        &world,
        &config,
        &m,
        "where",
        &["url=http://api.test:8080/".into()],
    );
    assert_eq!(seen.code(), Some(0), "{}", seen.json);
    assert!(seen.stdout().starts_with("198.18."), "{}", seen.json);
    assert_eq!(seen.connections()[0]["dialed"], format!("{WORLD_IP}:8080"));
    assert_eq!(granted.accepted(), 2, "{}", seen.json);

    // The same name, a port it is not granted: refused inside the sandbox
    // before anything leaves it (curl: "couldn't connect", exit 7), long
    // before curl's own timeout, and the server there never hears of it.
    let refused = run(
        &world,
        &config,
        &m,
        "get",
        &["url=http://api.test:8081/".into()],
    );
    assert_eq!(refused.code(), Some(7), "{}", refused.json);
    assert!(
        refused.elapsed < Duration::from_secs(u64::from(CLIENT_TIMEOUT_S) / 2),
        "{:?} {}",
        refused.elapsed,
        refused.json
    );
    assert_eq!(other.accepted(), 0, "{}", refused.json);
    assert_eq!(granted.accepted(), 2, "{}", refused.json);
}

#[test]
fn a_name_resolving_into_a_range_the_operator_did_not_allow_is_refused() {
    let Some(world) = World::new() else { return };
    world.map("api.test", &[world_ip()]);
    let server = world.http_server(8080, "never served");
    // The default config: 203.0.113.0/24 is a documentation range, which
    // spawnd dials for a name only when the operator allows it.
    let config = world.operator_config("default", "");
    let m = manifest(
        &world,
        "curl.toml",
        &format!(
            "programs = [{{ path = \"/usr/bin/curl\" }}]\n\
             network = [\"api.test:8080\"]\n\n\
             [capabilities.spawn.operations.get]\n\
             argv = \"curl -sS --max-time {CLIENT_TIMEOUT_S} {{url}}\"\n"
        ),
    );
    let run = run(
        &world,
        &config,
        &m,
        "get",
        &["url=http://api.test:8080/".into()],
    );
    assert_ne!(run.code(), Some(0), "{}", run.json);
    assert_eq!(server.accepted(), 0, "{}", run.json);
    let c = run.connections()[0];
    assert_eq!(c["allowed"], false, "{c}");
    assert_eq!(c["reason"], "resolved_to_denied_address", "{c}");
}

#[test]
fn curl_fetches_a_granted_name_over_https_trusting_a_test_ca_and_the_relay_checked_its_sni() {
    let Some(world) = World::new() else { return };
    world.map("api.test", &[world_ip()]);
    let tls = world.make_tls("api.test");
    let root = world.path("www");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "secure hello").unwrap();
    let log = world.start_http("https", 8443, &root, &World::https_options(&tls));
    let config = config(&world);
    let m = manifest(
        &world,
        "curl.toml",
        &format!(
            "programs = [{{ path = \"/usr/bin/curl\" }}]\n\
             fs_read = [\"{}\"]\n\
             network = [\"api.test:8443\"]\n\n\
             [capabilities.spawn.operations.get]\n\
             argv = \"curl -sS --max-time {CLIENT_TIMEOUT_S} --cacert {} {{url}}\"\n",
            tls.ca.parent().unwrap().display(),
            tls.ca.display()
        ),
    );
    let run = run(
        &world,
        &config,
        &m,
        "get",
        &["url=https://api.test:8443/".into()],
    );
    assert_eq!(run.code(), Some(0), "{}", run.json);
    assert_eq!(run.stdout(), "secure hello", "{}", run.json);
    // The server saw the request over TLS, with the name in both the
    // ClientHello and the Host header.
    assert_eq!(
        server_log(&log),
        ["GET / api.test:8443 api.test"],
        "{}",
        run.json
    );
    let c = run.connections()[0];
    assert_eq!(c["allowed"], true, "{c}");
    assert_eq!(c["sni"], "api.test", "{c}");
    assert_eq!(c["dialed"], format!("{WORLD_IP}:8443"), "{c}");
    // The audit trail has the connection too, in a chain that verifies.
    let audit = world.path("spawnd.audit.jsonl");
    let net: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["kind"] == "net")
        .collect();
    assert_eq!(net.len(), 1, "{net:?}");
    assert_eq!(net[0]["host"], "api.test", "{net:?}");
    assert_eq!(net[0]["sni"], "api.test", "{net:?}");
    run_checked(
        Command::new(env!("CARGO_BIN_EXE_spawnd"))
            .args(["audit", "verify"])
            .arg(&audit),
    );
}

/// Runs the host's git with a fixed identity and no user or system config.
fn git(args: &[&str]) -> String {
    let out = run_checked(
        Command::new("/usr/bin/git")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args([
                "-c",
                "user.name=spawnd test",
                "-c",
                "user.email=test@spawnd.invalid",
            ])
            .args(["-c", "safe.directory=*", "-c", "init.defaultBranch=main"])
            .args(args),
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn git_clones_over_smart_http_from_a_granted_name_into_its_write_scope() {
    let Some(world) = World::new() else { return };
    world.map("git.test", &[world_ip()]);
    // A repository with one commit, served bare by git http-backend.
    let work = world.path("source");
    let work_s = work.to_str().unwrap();
    git(&["init", "-q", work_s]);
    std::fs::write(work.join("README"), "cloned through spawnd\n").unwrap();
    git(&["-C", work_s, "add", "README"]);
    git(&["-C", work_s, "commit", "-q", "-m", "first"]);
    let head = git(&["-C", work_s, "rev-parse", "HEAD"]);
    let repos = world.path("repos");
    let bare = repos.join("project.git");
    git(&["clone", "-q", "--bare", work_s, bare.to_str().unwrap()]);
    let empty = world.path("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let log = world.start_http(
        "git-http",
        8080,
        &empty,
        &["--git-root", repos.to_str().unwrap()],
    );

    let out = world.writable_dir("out");
    let config = config(&world);
    let m = manifest(
        &world,
        "git.toml",
        &format!(
            "programs = [{{ path = \"/usr/bin/git\" }}]\n\
             fs_write = [\"{out}\"]\n\
             network = [\"git.test:8080\"]\n\n\
             [capabilities.spawn.operations.clone]\n\
             argv = \"git clone --quiet {{url}} {out}/project\"\n",
            out = out.display()
        ),
    );
    let run = run(
        &world,
        &config,
        &m,
        "clone",
        &["url=http://git.test:8080/git/project.git".into()],
    );
    assert_eq!(run.code(), Some(0), "{}", run.json);
    // On the host afterwards: the file, and the very commit.
    let clone = out.join("project");
    assert_eq!(
        std::fs::read_to_string(clone.join("README")).unwrap(),
        "cloned through spawnd\n"
    );
    assert_eq!(
        git(&["-C", clone.to_str().unwrap(), "rev-parse", "HEAD"]),
        head
    );
    // The server was asked for the refs, then for the pack, by name.
    let requests = server_log(&log);
    assert!(
        requests.iter().any(|r| r
            .starts_with("GET /git/project.git/info/refs?service=git-upload-pack git.test:8080")),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("POST /git/project.git/git-upload-pack git.test:8080")),
        "{requests:?}"
    );
    let network = run.network();
    assert_eq!(network["refused"], 0, "{network}");
    assert!(
        run.connections()
            .iter()
            .all(|c| c["host"] == "git.test" && c["dialed"] == format!("{WORLD_IP}:8080")),
        "{network}"
    );
}

/// Makes a package index under `root`, as PEP 503 lays it out: a wheel of
/// `demo-pkg` 1.0 (made here with python's zipfile) at
/// `/files/demo_pkg-1.0-py3-none-any.whl`, and `/simple/demo-pkg/`
/// linking to it with its sha256. Returns the wheel's bytes.
fn make_index(root: &Path) -> Vec<u8> {
    let files = root.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let wheel = files.join("demo_pkg-1.0-py3-none-any.whl");
    let script = r#"
import sys, zipfile
info = "demo_pkg-1.0.dist-info/"
entries = {
    "demo_pkg/__init__.py": "VALUE = 'served by the test index'\n",
    info + "METADATA": "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
    info + "WHEEL": "Wheel-Version: 1.0\nGenerator: spawnd-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    info + "RECORD": "",
}
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, text in entries.items():
        z.writestr(name, text)
"#;
    run_checked(Command::new(PYTHON).args(["-c", script]).arg(&wheel));
    let bytes = std::fs::read(&wheel).unwrap();
    let digest = sha256_hex(&bytes);
    let simple = root.join("simple");
    std::fs::create_dir_all(simple.join("demo-pkg")).unwrap();
    std::fs::write(
        simple.join("index.html"),
        "<!DOCTYPE html><html><body><a href=\"demo-pkg/\">demo-pkg</a></body></html>\n",
    )
    .unwrap();
    std::fs::write(
        simple.join("demo-pkg").join("index.html"),
        format!(
            "<!DOCTYPE html><html><body>\
             <a href=\"../../files/demo_pkg-1.0-py3-none-any.whl#sha256={digest}\">\
             demo_pkg-1.0-py3-none-any.whl</a></body></html>\n"
        ),
    )
    .unwrap();
    bytes
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn python_urllib_and_pip_download_fetch_from_a_local_https_index_by_name() {
    let Some(world) = World::new() else { return };
    world.map("pypi.test", &[world_ip()]);
    let tls = world.make_tls("pypi.test");
    let root = world.path("index");
    let wheel = make_index(&root);
    let log = world.start_http("index", 8443, &root, &World::https_options(&tls));
    let out = world.writable_dir("out");
    let config = config(&world);
    let index = "https://pypi.test:8443/simple/";
    let m = manifest(
        &world,
        "python.toml",
        &format!(
            "programs = [{{ path = \"{PYTHON}\" }}]\n\
             fs_read = [\"{ca_dir}\"]\n\
             fs_write = [\"{out}\"]\n\
             env_set = {{ HOME = \"{out}\" }}\n\
             network = [\"pypi.test:8443\"]\n\n\
             [capabilities.spawn.operations.urllib]\n\
             argv = \"python3 -c {{code}}\"\n\n\
             [capabilities.spawn.operations.pip]\n\
             argv = \"python3 -m pip download --no-deps --no-cache-dir \
                     --disable-pip-version-check --timeout {CLIENT_TIMEOUT_S} \
                     --cert {ca} --index-url {index} --dest {out} demo-pkg\"\n",
            ca_dir = tls.ca.parent().unwrap().display(),
            ca = tls.ca.display(),
            out = out.display()
        ),
    );

    let code = format!(
        "code=import ssl, urllib.request\n\
         tls = ssl.create_default_context(cafile='{ca}')\n\
         print(urllib.request.urlopen('{index}', timeout={CLIENT_TIMEOUT_S}, context=tls).read().decode())",
        ca = tls.ca.display()
    );
    let fetched = run(&world, &config, &m, "urllib", &[code]);
    assert_eq!(fetched.code(), Some(0), "{}", fetched.json);
    assert!(
        fetched
            .stdout()
            .contains("<a href=\"demo-pkg/\">demo-pkg</a>"),
        "{}",
        fetched.json
    );
    assert_eq!(
        server_log(&log),
        ["GET /simple/ pypi.test:8443 pypi.test"],
        "{}",
        fetched.json
    );
    assert_eq!(
        fetched.connections()[0]["sni"],
        "pypi.test",
        "{}",
        fetched.json
    );

    let pip = run(&world, &config, &m, "pip", &[]);
    assert_eq!(pip.code(), Some(0), "{}", pip.json);
    // The wheel pip saved on the host is the one the index served.
    let saved = std::fs::read(out.join("demo_pkg-1.0-py3-none-any.whl")).unwrap();
    assert_eq!(sha256_hex(&saved), sha256_hex(&wheel));
    let requests = server_log(&log);
    assert!(
        requests
            .iter()
            .any(|r| r == "GET /simple/demo-pkg/ pypi.test:8443 pypi.test"),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r == "GET /files/demo_pkg-1.0-py3-none-any.whl pypi.test:8443 pypi.test"),
        "{requests:?}"
    );
    assert_eq!(pip.network()["refused"], 0, "{}", pip.json);
    assert!(
        pip.connections().iter().all(|c| c["sni"] == "pypi.test"),
        "{}",
        pip.json
    );
}

/// Proxy variables pointing at `proxy.test:3128`, a server of the world
/// the sandbox is not granted.
const PROXY_ENV: &str = "env_set = { HTTP_PROXY = \"http://proxy.test:3128\", \
     HTTPS_PROXY = \"http://proxy.test:3128\", ALL_PROXY = \"http://proxy.test:3128\", \
     http_proxy = \"http://proxy.test:3128\", https_proxy = \"http://proxy.test:3128\", \
     all_proxy = \"http://proxy.test:3128\" }";

/// A plain HTTP GET with nothing but bash: `/dev/tcp` resolves the name
/// and connects by itself, whatever the environment says; prints the proxy
/// variable it was given, then the response's last line (the body).
const DEV_TCP: &str = r#"echo "proxy=$HTTP_PROXY"
exec 3<>/dev/tcp/api.test/8080 || exit 9
printf 'GET / HTTP/1.0\r\nHost: api.test\r\n\r\n' >&3
while IFS= read -r line || [ -n "$line" ]; do last=$line; done <&3
echo "$last""#;

#[test]
fn bash_dev_tcp_ignores_proxy_variables_and_reaches_the_granted_service_directly() {
    let Some(world) = World::new() else { return };
    world.map("api.test", &[world_ip()]);
    world.map("proxy.test", &[world_ip()]);
    let api = world.http_server(8080, "direct from api.test");
    let proxy = world.http_server(3128, "the proxy answered");
    let config = config(&world);
    let m = manifest(
        &world,
        "bash.toml",
        &format!(
            "programs = [{{ path = \"/usr/bin/bash\" }}, {{ path = \"/usr/bin/curl\" }}]\n\
             {PROXY_ENV}\n\
             network = [\"api.test:8080\"]\n\n\
             [capabilities.spawn.operations.devtcp]\n\
             argv = [\"bash\", \"-c\", '''{DEV_TCP}''']\n\n\
             [capabilities.spawn.operations.curl]\n\
             argv = \"curl -sS --max-time {CLIENT_TIMEOUT_S} http://api.test:8080/\"\n"
        ),
    );

    let bash = run(&world, &config, &m, "devtcp", &[]);
    assert_eq!(bash.code(), Some(0), "{}", bash.json);
    assert_eq!(
        bash.stdout(),
        "proxy=http://proxy.test:3128\ndirect from api.test\n",
        "{}",
        bash.json
    );
    assert_eq!(api.accepted(), 1, "{}", bash.json);
    assert_eq!(proxy.accepted(), 0, "{}", bash.json);
    let c = bash.connections()[0];
    assert_eq!(c["host"], "api.test", "{c}");
    assert_eq!(c["allowed"], true, "{c}");

    // The variables are in force: curl, which honours them, goes for the
    // proxy, whose name the sandbox's DNS does not know (curl: "couldn't
    // resolve proxy", exit 5). Neither server hears of it.
    let curl = run(&world, &config, &m, "curl", &[]);
    assert_eq!(curl.code(), Some(5), "{}", curl.json);
    assert_eq!(api.accepted(), 1, "{}", curl.json);
    assert_eq!(proxy.accepted(), 0, "{}", curl.json);
    assert_eq!(curl.network()["connections"], 0, "{}", curl.json);
    assert_eq!(
        curl.network()["dns_refused"][0]["name"],
        "proxy.test",
        "{}",
        curl.json
    );
}

/// The curl manifest of the unprivileged and daemon tests: `get` fetches
/// `http://api.test:8080/`.
fn curl_manifest(world: &World) -> PathBuf {
    manifest(
        world,
        "curl.toml",
        &format!(
            "programs = [{{ path = \"/usr/bin/curl\" }}]\n\
             network = [\"api.test:8080\"]\n\n\
             [capabilities.spawn.operations.get]\n\
             argv = \"curl -sS --max-time {CLIENT_TIMEOUT_S} http://api.test:8080/\"\n"
        ),
    )
}

#[test]
fn spawnd_running_as_nobody_relays_for_curl_too() {
    let Some(world) = World::new() else { return };
    world.map("api.test", &[world_ip()]);
    let server = world.http_server(8080, "hello, nobody");
    let m = curl_manifest(&world);
    // nobody's own directory, for the config and the audit log it writes.
    let home = world.writable_dir("nobody");
    let config = home.join("spawnd.toml");
    std::fs::write(
        &config,
        format!(
            "[audit]\npath = \"{}\"\n[network]\nallow_cidrs = [\"{WORLD_CIDR}\"]\n",
            home.join("audit.jsonl").display()
        ),
    )
    .unwrap();
    let run = run_op(&mut world.spawnd_as(65534, 65534, &config), &m, "get", &[]);
    assert_eq!(run.code(), Some(0), "{}", run.json);
    assert_eq!(run.stdout(), "hello, nobody", "{}", run.json);
    assert_eq!(run.json["data"]["isolation"]["uid"], 65534, "{}", run.json);
    // spawnd itself was nobody: the audit log it made is nobody's.
    let audit = std::fs::metadata(home.join("audit.jsonl")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&audit), 65534);
    assert_eq!(server.accepted(), 1, "{}", run.json);
    let c = run.connections()[0];
    assert_eq!(c["host"], "api.test", "{c}");
    assert_eq!(c["dialed"], format!("{WORLD_IP}:8080"), "{c}");
    assert!(
        world.dns_queries().iter().any(|q| q.name == "api.test"),
        "{:?}",
        world.dns_queries()
    );
}

/// A `spawnd serve` child, killed when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_daemon_in_the_world_relays_curl_to_a_granted_name() {
    let Some(world) = World::new() else { return };
    world.map("api.test", &[world_ip()]);
    let server = world.http_server(8080, "hello through the daemon");
    let m = curl_manifest(&world);
    let socket = world.path("spawnd.sock");
    let config = world.operator_config(
        "serve",
        &format!(
            "[server]\nsocket = \"{}\"\nmanifests = [\"{}\"]\n\
             [network]\nallow_cidrs = [\"{WORLD_CIDR}\"]\n",
            socket.display(),
            m.display()
        ),
    );
    let _daemon = Daemon(world.spawnd(&config).arg("serve").spawn().unwrap());
    let started = Instant::now();
    while !socket.exists() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The client needs no network of its own: it talks to the daemon over
    // the socket, from the host's namespace.
    let run = Run::of(
        Command::new(env!("CARGO_BIN_EXE_spawnd"))
            .env("SPAWND_CONFIG", &config)
            .args(["run", "--json", "--socket"])
            .arg(&socket)
            .args(["--connector", "local://test/clients", "--op", "get"]),
    );
    assert_eq!(run.code(), Some(0), "{}", run.json);
    assert_eq!(run.stdout(), "hello through the daemon", "{}", run.json);
    assert_eq!(server.accepted(), 1, "{}", run.json);
    let c = run.connections()[0];
    assert_eq!(c["host"], "api.test", "{c}");
    assert_eq!(c["dialed"], format!("{WORLD_IP}:8080"), "{c}");
}

#[test]
fn a_name_whose_ipv6_address_is_unreachable_is_dialed_at_its_ipv4_one() {
    let Some(world) = World::new() else { return };
    // 2001:db8::10 is on nothing in the world's internet: no route to it.
    world.map("api.test", &["2001:db8::10".parse().unwrap(), world_ip()]);
    let server = world.http_server(8080, "over IPv4");
    let config = world.operator_config(
        "dual",
        &format!("[network]\nallow_cidrs = [\"{WORLD_CIDR}\", \"2001:db8::/32\"]\n"),
    );
    let m = curl_manifest(&world);
    let run = run(&world, &config, &m, "get", &[]);
    assert_eq!(run.code(), Some(0), "{}", run.json);
    assert_eq!(run.stdout(), "over IPv4", "{}", run.json);
    assert_eq!(server.accepted(), 1, "{}", run.json);
    assert_eq!(run.connections()[0]["dialed"], format!("{WORLD_IP}:8080"));
}

#[test]
fn a_large_download_arrives_intact_through_the_relay() {
    let Some(world) = World::new() else { return };
    world.map("api.test", &[world_ip()]);
    let root = world.path("www");
    std::fs::create_dir_all(&root).unwrap();
    let blob: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(root.join("blob"), &blob).unwrap();
    world.start_http("blob", 8080, &root, &[]);
    let out = world.writable_dir("out");
    let config = config(&world);
    let m = manifest(
        &world,
        "curl.toml",
        &format!(
            "programs = [{{ path = \"/usr/bin/curl\" }}]\n\
             fs_write = [\"{out}\"]\n\
             network = [\"api.test:8080\"]\n\n\
             [capabilities.spawn.operations.get]\n\
             argv = \"curl -sS --max-time {CLIENT_TIMEOUT_S} -o {out}/blob http://api.test:8080/blob\"\n",
            out = out.display()
        ),
    );
    let run = run(&world, &config, &m, "get", &[]);
    assert_eq!(run.code(), Some(0), "{}", run.json);
    let got = std::fs::read(out.join("blob")).unwrap();
    assert_eq!(got.len(), blob.len());
    assert_eq!(sha256_hex(&got), sha256_hex(&blob));
    assert!(
        run.connections()[0]["bytes_down"].as_u64().unwrap() > blob.len() as u64,
        "{}",
        run.json
    );
}

/// curl's exit codes for a connection reset as, or soon after, it is made.
const RESET: [i32; 3] = [7, 52, 56];

#[test]
fn when_a_granted_name_does_not_resolve_or_nothing_listens_the_client_is_refused_at_once() {
    let Some(world) = World::new() else { return };
    let config = config(&world);
    let m = curl_manifest(&world);
    // The world's DNS server knows no api.test: the sandbox's stub still
    // answers (from the grants alone), the program connects, and spawnd,
    // finding no address, resets the connection at once. The kernel may
    // have completed the program's handshake on the listener by then, so
    // curl says "couldn't connect" (7), "empty reply" (52) or "recv
    // failure" (56), depending on when the reset reaches it.
    let unresolved = run(&world, &config, &m, "get", &[]);
    assert!(
        RESET.contains(&unresolved.code().unwrap_or(0)),
        "{}",
        unresolved.json
    );
    let c = unresolved.connections()[0];
    assert_eq!(c["allowed"], false, "{c}");
    assert_eq!(c["reason"], "unresolved", "{c}");
    assert_eq!(c["dialed"], Value::Null, "{c}");
    assert!(
        world.dns_queries().iter().all(|q| q.name == "api.test"),
        "{:?}",
        world.dns_queries()
    );

    // It resolves, but nothing listens there: spawnd's connect is refused,
    // and so is the program's.
    world.map("api.test", &[world_ip()]);
    let refused = run(&world, &config, &m, "get", &[]);
    assert!(
        RESET.contains(&refused.code().unwrap_or(0)),
        "{}",
        refused.json
    );
    let c = refused.connections()[0];
    assert_eq!(c["reason"], "connect_failed", "{c}");
    assert_eq!(c["dialed"], format!("{WORLD_IP}:8080"), "{c}");
    for run in [&unresolved, &refused] {
        assert!(
            run.elapsed < Duration::from_secs(u64::from(CLIENT_TIMEOUT_S) / 2),
            "{:?} {}",
            run.elapsed,
            run.json
        );
    }
}

#[test]
fn a_granted_name_is_resolved_as_itself_never_through_a_search_domain() {
    let Some(world) = World::new() else { return };
    // spawnd's resolver configuration searches corp.test first for names
    // with fewer than 2 dots (as a cluster's ndots:5 does for most), and
    // only api.test.corp.test has an address.
    std::fs::write(
        format!("/etc/netns/{}/resolv.conf", world.name()),
        "nameserver 127.0.0.1\nsearch corp.test\noptions ndots:2\n",
    )
    .unwrap();
    world.map("api.test.corp.test", &[world_ip()]);
    let server = world.http_server(8080, "another host's service");
    let config = config(&world);
    let m = curl_manifest(&world);
    let run = run(&world, &config, &m, "get", &[]);
    assert!(RESET.contains(&run.code().unwrap_or(0)), "{}", run.json);
    let c = run.connections()[0];
    assert_eq!(c["reason"], "unresolved", "{c}");
    assert_eq!(server.accepted(), 0, "{}", run.json);
    let asked: Vec<String> = world.dns_queries().into_iter().map(|q| q.name).collect();
    assert!(asked.iter().all(|name| name == "api.test"), "{asked:?}");
    // The control: the same name granted, mapped, is served.
    world.map("api.test", &[world_ip()]);
    let served = run_checked_get(&world, &config, &m);
    assert_eq!(served, "another host's service");
    assert_eq!(server.accepted(), 1);
}

fn run_checked_get(world: &World, config: &Path, m: &Path) -> String {
    let run = run(world, config, m, "get", &[]);
    assert_eq!(run.code(), Some(0), "{}", run.json);
    run.stdout().to_string()
}

/// `spawnd learn` of a curl fetch: with `--net forward` the fetch goes
/// through (the server hears it once), the draft names exactly the
/// `host:port` dialed, and the draft fetches again under `spawnd run` with
/// nothing else granted; with `--net record` (the default) the connection is
/// recorded and refused, so the server hears nothing, and the draft names
/// the same pair.
#[test]
fn learn_drafts_the_destination_a_client_reached_and_the_draft_fetches_again() {
    use std::os::unix::fs::PermissionsExt;
    let Some(world) = World::new() else { return };
    world.map("api.test", &[world_ip()]);
    let server = world.http_server(8080, "hello from api.test");
    let config = config(&world);
    let ws = world.path("learn-ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    let curl = [
        "curl",
        "-sS",
        "--max-time",
        "60",
        "-o",
        "page.txt",
        "http://api.test:8080/",
    ];
    let learn = |net: &str, draft: &Path| {
        let out = world
            .spawnd(&config)
            .args(["learn", "--net", net, "--output"])
            .arg(draft)
            .arg("--")
            .args(curl)
            .current_dir(&ws)
            .output()
            .unwrap();
        let text = std::fs::read_to_string(draft).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        (out, text)
    };

    let recorded = world.path("recorded.toml");
    let (out, text) = learn("record", &recorded);
    assert!(!out.status.success(), "the refused fetch fails: {out:?}");
    assert!(text.contains("network = [\"api.test:8080\"]"), "{text}");
    assert_eq!(server.accepted(), 0, "record mode dials nothing");

    let forwarded = world.path("forwarded.toml");
    let (out, text) = learn("forward", &forwarded);
    assert!(out.status.success(), "{out:?}\n{text}");
    assert!(text.contains("network = [\"api.test:8080\"]"), "{text}");
    assert_eq!(server.accepted(), 1);
    assert_eq!(
        std::fs::read_to_string(ws.join("page.txt")).unwrap(),
        "hello from api.test"
    );

    std::fs::remove_file(ws.join("page.txt")).unwrap();
    let mut again = world.spawnd(&config);
    again
        .args([
            "--mode",
            "write",
            "run",
            "--json",
            "--op",
            "run",
            "--workspace",
        ])
        .arg(&ws)
        .arg("--manifest")
        .arg(&forwarded)
        .current_dir(&ws);
    let rerun = Run::of(&mut again);
    assert_eq!(rerun.code(), Some(0), "{}\n{text}", rerun.json);
    assert_eq!(server.accepted(), 2, "{}", rerun.json);
    assert_eq!(
        std::fs::read_to_string(ws.join("page.txt")).unwrap(),
        "hello from api.test"
    );
}
