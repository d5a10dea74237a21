//! Every fuzz seed (`fuzz/seeds/`) and every input a fuzzer once crashed on
//! (`fuzz/regressions/`) goes through the fuzz targets' own checks
//! (`spawnd::fuzzing`), so parsers keep handling them. The
//! `client_hello_rustls` target's reference parser (rustls) belongs to the
//! fuzz crate only, so here its inputs go through spawnd's side of the
//! checks; what it found is pinned, with rustls' answer, in the unit tests
//! of `egress::client_hello`.

use std::path::Path;

type Check = fn(&[u8]);

const TARGETS: [(&str, Check); 8] = [
    ("manifest", spawnd::fuzzing::manifest),
    ("template", spawnd::fuzzing::template),
    ("rpc_request", spawnd::fuzzing::rpc_request),
    ("audit_verify", spawnd::fuzzing::audit_verify),
    ("grant", spawnd::fuzzing::grant),
    ("dns_query", spawnd::fuzzing::dns_query),
    ("client_hello", spawnd::fuzzing::client_hello),
    ("client_hello_rustls", spawnd::fuzzing::client_hello),
];

fn inputs(dir: &Path) -> Vec<std::path::PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn every_seed_and_every_past_finding_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut seen = 0;
    for (name, check) in TARGETS {
        let seeds = inputs(&root.join("seeds").join(name));
        assert!(!seeds.is_empty(), "fuzz/seeds/{name} has no seeds");
        for path in seeds
            .into_iter()
            .chain(inputs(&root.join("regressions").join(name)))
        {
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{} fails {name}", path.display());
            seen += 1;
        }
    }
    assert!(seen >= 20, "{seen} inputs");
}
