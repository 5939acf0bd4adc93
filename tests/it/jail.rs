//! The path jail against a hostile tree: symlinks to `/`, to parents, chains, dangling links,
//! absolute and `/proc` links, a link swapped while it is opened, deny-listed names in any
//! case, encoded names taken literally, and a read-only shared root. Canary files outside the
//! root are never read, written or created next to.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::symlink;
use std::path::Path;

use toolgate::jail::{Jail, JailError};

const CANARY: &str = "CANARY-must-never-be-read";

fn tree() -> (tempfile::TempDir, Jail) {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("canary.txt"), CANARY).unwrap();
    let root = t.join("root");
    for d in ["docs", ".Git", "Secrets", "NODE_MODULES", "node_modules"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::create_dir_all(t.join("shared")).unwrap();
    std::fs::write(t.join("shared/c.txt"), "contract").unwrap();
    let files = [
        ("ok.txt", "fine"),
        ("docs/readme.md", "readme"),
        ("docs/%2e%2e", "literal"),
        (".ENV", "x"),
        (".env.local", "x"),
        (".Git/config", "x"),
        ("Secrets/key", "x"),
        ("node_modules/x", "x"),
        ("NODE_MODULES/x", "x"),
    ];
    for (f, c) in files {
        std::fs::write(root.join(f), c).unwrap();
    }
    let links = [
        ("link_root", "/".to_owned()),
        ("link_up", "..".to_owned()),
        ("docs/link_parent", "../../canary.txt".to_owned()),
        ("chain1", "chain2".to_owned()),
        ("chain2", "chain3".to_owned()),
        ("chain3", "../canary.txt".to_owned()),
        ("inner1", "docs/inner2".to_owned()),
        ("docs/inner2", "readme.md".to_owned()),
        ("dangling", "nowhere.txt".to_owned()),
        ("dangling_out", "../created_outside.txt".to_owned()),
        ("link_env", ".ENV".to_owned()),
        ("docs/link_git", "../.Git/config".to_owned()),
        ("abs_link", t.join("canary.txt").display().to_string()),
        ("proc_link", "/proc/self/root/etc/hostname".to_owned()),
        ("swap", "ok.txt".to_owned()),
        ("swap_good", "ok.txt".to_owned()),
        ("swap_bad", "../canary.txt".to_owned()),
    ];
    for (l, target) in links {
        symlink(target, root.join(l)).unwrap();
    }
    let deny = toolgate::globs::SegmentGlobs::default();
    let jail = Jail::new(&root, &[("contracts".to_owned(), t.join("shared"))], &deny).unwrap();
    (tmp, jail)
}

fn read(jail: &Jail, path: &str) -> Result<String, JailError> {
    let mut opened = jail.open_read(path)?;
    let mut s = String::new();
    opened.file.read_to_string(&mut s).unwrap();
    assert_ne!(s, CANARY, "{path} read the canary");
    Ok(s)
}

fn outside_untouched(t: &Path) {
    let mut names: Vec<String> = std::fs::read_dir(t)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["canary.txt", "root", "shared"]);
    assert_eq!(
        std::fs::read_to_string(t.join("canary.txt")).unwrap(),
        CANARY
    );
}

#[test]
fn reads_stay_below_the_root_and_off_the_deny_list() {
    let (tmp, jail) = tree();
    assert_eq!(read(&jail, "ok.txt").unwrap(), "fine");
    assert_eq!(read(&jail, "docs/../ok.txt").unwrap(), "fine");
    assert_eq!(read(&jail, "inner1").unwrap(), "readme");
    assert_eq!(jail.open_read("inner1").unwrap().resolved, "docs/readme.md");
    // Encoded names are names.
    assert_eq!(read(&jail, "docs/%2e%2e").unwrap(), "literal");
    assert!(matches!(
        read(&jail, "%2e%2e/canary.txt"),
        Err(JailError::NotFound)
    ));
    for p in [
        "link_root/etc/hostname",
        "link_up/canary.txt",
        "docs/link_parent",
        "chain1",
        "abs_link",
        "proc_link",
    ] {
        let r = read(&jail, p);
        assert!(matches!(r, Err(JailError::Escapes)), "{p}: {r:?}");
    }
    for p in [
        "/etc/passwd",
        "../canary.txt",
        "docs/../../canary.txt",
        "-rf",
        "a\0b",
    ] {
        assert!(matches!(read(&jail, p), Err(JailError::Invalid(_))), "{p}");
    }
    for p in [
        ".env",
        ".ENV",
        ".env.local",
        ".Git/config",
        ".git/config",
        "Secrets/key",
        "node_modules/x",
        "NODE_MODULES/x",
        "link_env",
        "docs/link_git",
    ] {
        let r = read(&jail, p);
        assert!(matches!(r, Err(JailError::Denied(_))), "{p}: {r:?}");
    }
    assert!(matches!(read(&jail, "dangling"), Err(JailError::NotFound)));
    assert!(matches!(read(&jail, "docs"), Err(JailError::NotAFile)));
    assert_eq!(read(&jail, "contracts/c.txt").unwrap(), "contract");
    outside_untouched(tmp.path());
}

#[test]
fn writes_create_below_the_root_and_never_follow_a_last_link() {
    let (tmp, jail) = tree();
    let mut f = jail.create("docs/new.txt").unwrap();
    assert_eq!(f.resolved, "docs/new.txt");
    f.file.write_all(b"new").unwrap();
    assert_eq!(read(&jail, "docs/new.txt").unwrap(), "new");
    // A last segment that is a link is never followed, even to a place inside the root.
    for p in [
        "dangling_out",
        "abs_link",
        "chain1",
        "link_up/x.txt",
        "link_root/tmp/x",
        "docs/link_git",
        "inner1",
    ] {
        let r = jail.create(p);
        assert!(matches!(r, Err(JailError::Escapes)), "{p}: {r:?}");
    }
    for p in [
        ".env",
        ".git/hooks/pre-commit",
        "Secrets/new",
        "link_up/root/.env",
    ] {
        let r = jail.create(p);
        assert!(matches!(r, Err(JailError::Denied(_))), "{p}: {r:?}");
    }
    assert!(matches!(
        jail.create("contracts/x.txt"),
        Err(JailError::ReadOnly(_))
    ));
    assert!(matches!(jail.create("docs"), Err(JailError::NotAFile)));
    assert!(matches!(
        jail.create("missing/dir/x.txt"),
        Err(JailError::NotFound)
    ));
    outside_untouched(tmp.path());
}

#[test]
fn a_link_swapped_during_the_open_never_escapes() {
    let (tmp, jail) = tree();
    let root = tmp.path().join("root");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let root = root.clone();
        std::thread::spawn(move || {
            let mut flips = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Each rename atomically replaces `swap` with the other link.
                let (from, tmp_name) = if flips.is_multiple_of(2) {
                    ("swap_bad", "swap_bad_copy")
                } else {
                    ("swap_good", "swap_good_copy")
                };
                let target = std::fs::read_link(root.join(from)).unwrap();
                let _ = std::fs::remove_file(root.join(tmp_name));
                symlink(target, root.join(tmp_name)).unwrap();
                std::fs::rename(root.join(tmp_name), root.join("swap")).unwrap();
                flips += 1;
            }
            flips
        })
    };
    let (mut ok, mut refused) = (0, 0);
    // At least 3000 reads, and on until both outcomes were seen (a loaded machine may
    // schedule the flipper rarely), within a bound.
    let started = std::time::Instant::now();
    let mut reads = 0;
    while reads < 3000
        || ((ok == 0 || refused == 0) && started.elapsed() < std::time::Duration::from_secs(30))
    {
        reads += 1;
        match read(&jail, "swap") {
            Ok(s) => {
                assert_eq!(s, "fine");
                ok += 1;
            }
            Err(JailError::Escapes) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(
        flips > 10 && ok > 0 && refused > 0,
        "{flips} flips, {ok} ok, {refused} refused"
    );
    outside_untouched(tmp.path());
}
