//! HMAC links on by default, key rotation, and Ed25519 signed checkpoints, through the real
//! binary: tampering done offline on the data directory, then `toolgate audit verify`.

use serde_json::{Value, json};
use toolgate::audit::{Chain, Entry, Link, Record, RingKey, keys};
use toolgate::storage::{DEFAULT_CACHE_BYTES, Stores};

use crate::helpers::*;
use crate::process::{Server, exchange, start, toolgate};

const BOB: &str = "demo-bob-token";

fn decide(server: &Server, n: usize) {
    let call = json!({"tool": "read_file", "args": {"path": "src/main.rs"}});
    for _ in 0..n {
        let (s, d) =
            exchange(server.port, "POST", "/v1/authorize", Some(DEV), Some(&call)).unwrap();
        assert_eq!(s, 200, "{d}");
    }
}

fn head(server: &Server) -> Value {
    exchange(server.port, "GET", "/v1/audit/head", Some(BOB), None)
        .unwrap()
        .1
}

/// `toolgate audit <args>` in the set's directory: exit code and standard output.
fn audit(set: &TempSet, args: &[&str]) -> (i32, String) {
    let mut all = vec!["audit"];
    all.extend_from_slice(args);
    let out = toolgate(set.dir.path(), &all, &[]);
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn verify_with(set: &TempSet, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["verify", "--data-dir", "data"];
    args.extend_from_slice(extra);
    audit(set, &args)
}

fn data(set: &TempSet) -> std::path::PathBuf {
    set.dir.path().join("data")
}

/// Appends `records` to the stopped sidecar's log, as someone with write access would.
fn append(set: &TempSet, records: &[Record]) {
    let stores = Stores::open_existing(&data(set), DEFAULT_CACHE_BYTES).unwrap();
    stores.audit.append(records, &[], true).unwrap();
}

fn newest(set: &TempSet) -> Record {
    let stores = Stores::open_existing(&data(set), DEFAULT_CACHE_BYTES).unwrap();
    stores.audit.last().unwrap().unwrap()
}

fn forged_entry(id: &str) -> Entry {
    raw_entry(serde_json::json!({
        "kind": "decision",
        "id": id,
        "at_ms": 1,
        "decision": "allow",
        "principal": "Agent::\"dev-agent\"",
        "tool": "deploy",
    }))
}

/// The keyring's keys, as stored: (id, secret).
fn ring_keys(set: &TempSet) -> Vec<(String, Vec<u8>)> {
    let text = std::fs::read_to_string(data(set).join(keys::KEYRING_FILE)).unwrap();
    let ring: Value = serde_json::from_str(&text).unwrap();
    ring["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["id"].as_str().unwrap().to_owned(),
                hex::decode(k["secret"].as_str().unwrap()).unwrap(),
            )
        })
        .collect()
}

/// A chain that seals new records with `secret`, labelled `id`.
fn sealing_with(id: &str, secret: &[u8]) -> Chain {
    Chain::ring(
        Link::Plain,
        vec![RingKey {
            id: id.to_owned(),
            from_seq: 1,
            secret: Some(secret.to_vec()),
        }],
    )
}

/// The finding: a record appended after an exported head, re-chained with plain
/// SHA-256, passed `verify --head`. Under the default (keyed) chain it is caught, with or
/// without the head.
#[test]
fn a_record_forged_after_an_exported_head_is_caught_by_default() {
    let set = TempSet::new();
    let server = start(&set);
    decide(&server, 5);
    std::fs::write(set.dir.path().join("head.json"), head(&server).to_string()).unwrap();
    drop(server);

    // The key was generated at first start, kept in the data directory, 0600, protected.
    let ring = data(&set).join(keys::KEYRING_FILE);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&ring).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let cfg = toolgate::config::Config::from_file(&set.dir.path().join("toolgate.toml")).unwrap();
    assert!(
        cfg.exec
            .protected
            .iter()
            .any(|p| p.ends_with(keys::KEYRING_FILE)),
        "{:?}",
        cfg.exec.protected
    );

    let (code, out) = verify_with(&set, &["--head", "head.json"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("mode: keyed"), "{out}");

    let last = newest(&set);
    let forged = Chain::plain().seal(&last.hash, last.seq + 1, forged_entry("forged"));
    append(&set, &[forged]);
    for extra in [&["--head", "head.json"][..], &[]] {
        let (code, out) = verify_with(&set, extra);
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains(&format!("BROKEN at record {}", last.seq + 1))
                && out.contains("re-chained without the key"),
            "{out}"
        );
    }
}

/// A log rolled back to an older copy (its tail cut) verifies on its own links, and the
/// output says truncation is not detected; an exported head or a signed checkpoint catches
/// it. A checkpoint also catches a tail rewritten by someone holding the HMAC key.
#[test]
fn truncation_is_caught_with_a_head_or_a_signed_checkpoint() {
    let set = TempSet::new();
    let server = start(&set);
    decide(&server, 3);
    drop(server);
    let backup = set.dir.path().join("data.bak");
    copy_dir(&data(&set), &backup);
    let server = start(&set);
    decide(&server, 3);
    std::fs::write(set.dir.path().join("head.json"), head(&server).to_string()).unwrap();
    drop(server);

    let (code, out) = audit(&set, &["keygen", "--out", "signing.key"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = audit(
        &set,
        &[
            "checkpoint",
            "--data-dir",
            "data",
            "--signing-key",
            "signing.key",
            "--out",
            "cp.json",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let cp_args = ["--checkpoint", "cp.json", "--public-key", "signing.key.pub"];
    let (code, out) = verify_with(&set, &cp_args);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("signed checkpoint"), "{out}");

    // Roll the log back to the copy.
    std::fs::remove_dir_all(data(&set)).unwrap();
    copy_dir(&backup, &data(&set));
    let (code, out) = verify_with(&set, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("cannot detect: records cut from the end"),
        "{out}"
    );
    for extra in [&["--head", "head.json"][..], &cp_args] {
        let (code, out) = verify_with(&set, extra);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("truncated"), "{out}");
    }

    // Someone holding the HMAC key re-grows the tail: the links hold, the checkpoint does not.
    let (id, secret) = ring_keys(&set).pop().unwrap();
    let chain = sealing_with(&id, &secret);
    let cp: Value =
        serde_json::from_str(&std::fs::read_to_string(set.dir.path().join("cp.json")).unwrap())
            .unwrap();
    let mut last = newest(&set);
    let mut forged = Vec::new();
    while last.seq < cp["seq"].as_u64().unwrap() {
        let r = chain.seal(
            &last.hash,
            last.seq + 1,
            forged_entry(&format!("f{}", last.seq)),
        );
        forged.push(r.clone());
        last = r;
    }
    append(&set, &forged);
    let (code, out) = verify_with(&set, &[]);
    assert_eq!(
        code, 0,
        "a key holder's forgery passes the links alone: {out}"
    );
    let (code, out) = verify_with(&set, &cp_args);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("differs from the exported head"), "{out}");

    // A checkpoint edited after signing is refused before any walk.
    let mut edited = cp.clone();
    edited["seq"] = json!(cp["seq"].as_u64().unwrap() - 1);
    std::fs::write(set.dir.path().join("cp.json"), edited.to_string()).unwrap();
    let (code, out) = verify_with(&set, &cp_args);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("does not hold"), "{out}");
}

/// `audit rotate-key` adds a key for the records after the newest; the next start records
/// the rotation; records under both keys verify; a record sealed with the retired key, or
/// with a key not in the ring, is caught.
#[test]
fn records_before_and_after_a_rotation_verify_and_a_wrong_key_is_caught() {
    let set = TempSet::new();
    let server = start(&set);
    decide(&server, 3);
    drop(server);
    let before = newest(&set).seq;
    let (code, out) = audit(&set, &["rotate-key", "--data-dir", "data"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("seals records from {} on", before + 1)),
        "{out}"
    );
    let server = start(&set);
    decide(&server, 3);
    drop(server);

    let (code, out) = verify_with(&set, &[]);
    assert_eq!(code, 0, "{out}");
    let ring = ring_keys(&set);
    assert_eq!(ring.len(), 2);
    assert!(
        out.contains(&format!("{} from record 1", ring[0].0))
            && out.contains(&format!("{} from record {}", ring[1].0, before + 1)),
        "{out}"
    );
    let (code, exported) = audit(&set, &["export", "--data-dir", "data"]);
    assert_eq!(code, 0);
    let rotation: Vec<Value> = exported
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["entry"]["stage"] == "audit_key")
        .collect();
    assert_eq!(rotation.len(), 2, "{exported}");
    assert_eq!(rotation[1]["seq"], before + 1);
    assert!(
        rotation[1]["entry"]["detail"]
            .as_str()
            .unwrap()
            .contains("rotated"),
        "{rotation:?}"
    );

    // Sealed (and labelled) with the retired key, after the rotation.
    let clean = set.dir.path().join("clean");
    copy_dir(&data(&set), &clean);
    let last = newest(&set);
    let (old_id, old) = &ring[0];
    append(
        &set,
        &[sealing_with(old_id, old).seal(&last.hash, last.seq + 1, forged_entry("old-key"))],
    );
    let (code, out) = verify_with(&set, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("names key `{old_id}`, but key `{}`", ring[1].0)),
        "{out}"
    );

    // Labelled with the current key, sealed with another: the link does not hold.
    std::fs::remove_dir_all(data(&set)).unwrap();
    copy_dir(&clean, &data(&set));
    let wrong = sealing_with(&ring[1].0, b"not the key").seal(
        &last.hash,
        last.seq + 1,
        forged_entry("wrong-key"),
    );
    assert_eq!(wrong.key.as_deref(), Some(ring[1].0.as_str()));
    append(&set, &[wrong]);
    let (code, out) = verify_with(&set, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("was altered"), "{out}");
}

/// A log written before keys were on by default (plain links, no key ids, no keyring) still
/// verifies, and the output says it is unkeyed and what that cannot catch. The next start
/// keys the chain from the next record on; the older records stay as they were.
#[test]
fn a_plain_log_from_before_keys_still_verifies_and_says_it_is_unkeyed() {
    let set = TempSet::new();
    {
        let stores = Stores::open(&data(&set)).unwrap();
        let plain = Chain::plain();
        let mut prev = toolgate::audit::GENESIS.to_owned();
        let mut batch = Vec::new();
        for seq in 1..=4 {
            let r = plain.seal(&prev, seq, forged_entry(&format!("old-{seq}")));
            assert!(r.key.is_none());
            prev = r.hash.clone();
            batch.push(r);
        }
        stores.audit.append(&batch, &[], true).unwrap();
    }
    let (code, out) = verify_with(&set, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("mode: unkeyed: 4 records with plain SHA-256 links")
            && out.contains("cannot detect: a tail rewritten"),
        "{out}"
    );
    assert!(!data(&set).join(keys::KEYRING_FILE).exists());

    let server = start(&set);
    decide(&server, 2);
    drop(server);
    let (code, out) = verify_with(&set, &[]);
    assert_eq!(code, 0, "{out}");
    let id = &ring_keys(&set)[0].0;
    assert!(
        out.contains(&format!(
            "mode: keyed: 4 records under HMAC-SHA-256 keys ({id} from record 5)"
        )) && out.contains("4 older records with plain SHA-256 links"),
        "{out}"
    );
    // A plain re-chain of the newest records is now caught.
    let last = newest(&set);
    append(
        &set,
        &[Chain::plain().seal(&last.hash, last.seq + 1, forged_entry("after-upgrade"))],
    );
    let (code, out) = verify_with(&set, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("re-chained without the key"), "{out}");
}

/// With `audit.hmac_key_file` the key is named in the keyring, never copied: `verify` needs
/// the file (from the config or `--hmac-key-file`). Pointing the setting to a new file rotates;
/// dropping it while it seals the chain is refused at start.
#[test]
fn a_configured_key_is_named_not_copied_and_rotates_by_config() {
    let set = TempSet::new();
    std::fs::write(
        set.dir.path().join("one.key"),
        "first key, thirty-two bytes long",
    )
    .unwrap();
    std::fs::write(
        set.dir.path().join("two.key"),
        "second key, also 32 bytes long!!",
    )
    .unwrap();
    let server = crate::process::start_with(&set, "[audit]\nhmac_key_file = \"one.key\"\n");
    decide(&server, 2);
    drop(server);
    let ring = std::fs::read_to_string(data(&set).join(keys::KEYRING_FILE)).unwrap();
    assert!(!ring.contains("secret"), "{ring}");
    // Without the key, not even the ledger's frames can be checked (so none is applied).
    let (code, out) = verify_with(&set, &[]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("pass it with --hmac-key-file"), "{out}");
    let (code, out) = audit(&set, &["verify", "--config", "toolgate.toml"]);
    assert_eq!(code, 0, "{out}");

    let server = crate::process::start_with(&set, "[audit]\nhmac_key_file = \"two.key\"\n");
    decide(&server, 2);
    drop(server);
    let (code, out) = audit(&set, &["verify", "--config", "toolgate.toml"]);
    assert_eq!(code, 1, "the retired key is needed too: {out}");
    let (code, out) = audit(
        &set,
        &[
            "verify",
            "--config",
            "toolgate.toml",
            "--hmac-key-file",
            "one.key",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("from record 1") && out.contains("from record 5"),
        "{out}"
    );

    let refused = crate::process::serve_refuses(&set, "data_dir = \"data\"\n");
    assert!(refused.contains("no longer names"), "{refused}");
}
